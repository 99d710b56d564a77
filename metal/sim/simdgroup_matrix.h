// metal-sim: simdgroup_matrix<T, 8, 8>. On a GPU the 64 elements are spread over the 32 lanes; in the
// sim every lane holds the whole matrix and performs each load / store / multiply itself, so all lanes
// hold identical values. Products accumulate in float.
// With full checks (MARKBASE_SIM_CHECKS=full) each load / store / multiply is a collective step all 32
// lanes must reach together (rt::simdgroup_matrix_step), and a store into threadgroup memory writes
// each element from one lane only (lane = element index mod 32), as the GPU's lanes each store their
// share: a lane reading another lane's share without a barrier is then a reported race. Otherwise every
// lane stores the whole matrix (the same bytes once per lane).
// thread_elements() (Apple's per-lane element layout) is not provided.
#pragma once
#include <utility>

#include "sim/device_ptr.h"
#include "sim/runtime.h"
#include "sim/simd.h"
#include "sim/types.h"

namespace metal {

template <class T, int Rows, int Cols>
struct simdgroup_matrix {
  static_assert(Rows == 8 && Cols == 8, "metal-sim supports 8x8 simdgroup matrices");
  T e[Rows][Cols];  // [row][col]
  simdgroup_matrix() = default;
};

typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
typedef simdgroup_matrix<half, 8, 8> simdgroup_half8x8;
typedef simdgroup_matrix<bfloat, 8, 8> simdgroup_bfloat8x8;

template <class T, int R, int C>
inline simdgroup_matrix<T, R, C> make_filled_simdgroup_matrix(T value) {
  simdgroup_matrix<T, R, C> m;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) m.e[r][c] = value;
  return m;
}

namespace sim_detail {
// Element (r, c) of the matrix starts at src + origin.y * elements_per_row + origin.x (origin = (col, row)).
template <class T, int R, int C, class Read>
inline void load(simdgroup_matrix<T, R, C>& d, ulong elements_per_row, ulong2 origin, bool transpose, Read read) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      ulong row = origin.y + (transpose ? ulong(c) : ulong(r));
      ulong col = origin.x + (transpose ? ulong(r) : ulong(c));
      d.e[r][c] = read(row * elements_per_row + col);
    }
}
// d = dᵀ (R == C). Out of line and not instrumented: d is the lane's own copy, not threadgroup memory.
template <class T, int R, int C>
[[gnu::noinline]] __attribute__((no_sanitize("coverage"))) void transpose(simdgroup_matrix<T, R, C>& d) {
  static_assert(R == C);
  for (int r = 0; r < R; ++r)
    for (int c = r + 1; c < C; ++c) std::swap(d.e[r][c], d.e[c][r]);
}
// Elements whose index r * C + c is `lane` mod 32, or all of them when lane < 0.
template <class T, int R, int C, class Write>
inline void store(const simdgroup_matrix<T, R, C>& a, ulong elements_per_row, ulong2 origin, bool transpose, Write write,
                  int lane = -1) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      if (lane >= 0 && (r * C + c) % 32 != lane) continue;
      ulong row = origin.y + (transpose ? ulong(c) : ulong(r));
      ulong col = origin.x + (transpose ? ulong(r) : ulong(c));
      write(row * elements_per_row + col, a.e[r][c]);
    }
}
}  // namespace sim_detail

// From threadgroup or thread memory (a plain pointer in the sim). The 8 source rows (origin.y …, columns
// origin.x …; the same block transposed or not) are copied whole, each row checked as one read: every lane
// still reads every element, with one check per row instead of one hook call per element. Always inlined:
// read_rows names the access by its return address, which must lie in the kernel's code for its line.
template <class T, int R, int C>
[[gnu::always_inline]] inline void simdgroup_load(simdgroup_matrix<T, R, C>& d, const T* src,
                                                  ulong elements_per_row = C, ulong2 matrix_origin = 0,
                                                  bool transpose_matrix = false, MB_SIM_SITE) {
  ::metal_sim::rt::simdgroup_matrix_step(MB_SIM_SITE_ARG);
  ::metal_sim::rt::read_rows(&d.e[0][0], src + matrix_origin.y * elements_per_row + matrix_origin.x, C * sizeof(T), R,
                             elements_per_row * sizeof(T));
  if (transpose_matrix) sim_detail::transpose(d);
}
// From device memory: every element read is bounds-checked.
template <class T, int R, int C, class U>
  requires std::is_same_v<std::remove_const_t<U>, T>
inline void simdgroup_load(simdgroup_matrix<T, R, C>& d, ::metal_sim::device_ptr<U> src,
                           ulong elements_per_row = C, ulong2 matrix_origin = 0, bool transpose_matrix = false, MB_SIM_SITE) {
  ::metal_sim::rt::simdgroup_matrix_step(MB_SIM_SITE_ARG);
  sim_detail::load(d, elements_per_row, matrix_origin, transpose_matrix, [&](ulong i) { return T(src[ptrdiff_t(i)]); });
}
template <class T, int R, int C>
inline void simdgroup_store(const simdgroup_matrix<T, R, C>& a, T* dst, ulong elements_per_row = C,
                                          ulong2 matrix_origin = 0, bool transpose_matrix = false, MB_SIM_SITE) {
  const ::metal_sim::rt::MatrixStep step = ::metal_sim::rt::simdgroup_matrix_step(MB_SIM_SITE_ARG);
  const int lane = step.distribute && ::metal_sim::rt::is_threadgroup_memory(dst) ? int(step.lane) : -1;
  sim_detail::store(a, elements_per_row, matrix_origin, transpose_matrix, [&](ulong i, T v) { dst[i] = v; }, lane);
}
template <class T, int R, int C>
inline void simdgroup_store(const simdgroup_matrix<T, R, C>& a, ::metal_sim::device_ptr<T> dst, ulong elements_per_row = C,
                            ulong2 matrix_origin = 0, bool transpose_matrix = false, MB_SIM_SITE) {
  ::metal_sim::rt::simdgroup_matrix_step(MB_SIM_SITE_ARG);
  sim_detail::store(a, elements_per_row, matrix_origin, transpose_matrix, [&](ulong i, T v) { dst[ptrdiff_t(i)] = v; });
}

namespace sim_detail {
// d = a * b + c, each element a float sum over k in order.
template <class T, int R, int K, int C>
inline void multiply_accumulate(simdgroup_matrix<T, R, C>& d, const simdgroup_matrix<T, R, K>& a,
                                const simdgroup_matrix<T, K, C>& b, const simdgroup_matrix<T, R, C>& c) {
  simdgroup_matrix<T, R, C> out;
  for (int r = 0; r < R; ++r)
    for (int col = 0; col < C; ++col) {
      float s = float(c.e[r][col]);
      for (int k = 0; k < K; ++k) s += float(a.e[r][k]) * float(b.e[k][col]);
      out.e[r][col] = T(s);
    }
  d = out;
}
}  // namespace sim_detail
template <class T, int R, int K, int C>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, R, C>& d, const simdgroup_matrix<T, R, K>& a,
                                                        const simdgroup_matrix<T, K, C>& b, const simdgroup_matrix<T, R, C>& c, MB_SIM_SITE) {
  ::metal_sim::rt::simdgroup_matrix_step(MB_SIM_SITE_ARG);
  sim_detail::multiply_accumulate(d, a, b, c);
}
template <class T, int R, int K, int C>
inline void simdgroup_multiply(simdgroup_matrix<T, R, C>& d, const simdgroup_matrix<T, R, K>& a,
                                             const simdgroup_matrix<T, K, C>& b, MB_SIM_SITE) {
  ::metal_sim::rt::simdgroup_matrix_step(MB_SIM_SITE_ARG);
  sim_detail::multiply_accumulate(d, a, b, make_filled_simdgroup_matrix<T, R, C>(T(0)));
}

}  // namespace metal
