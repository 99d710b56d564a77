// Prefill GEMM with bf16 weights on Intel AMX (TDPBF16PS): Y[m, n] = Σ_k bf16(x[m, k]) · w[n, k] (+ bias[n]).
//
// The same products as bf16_gemm.cpp's vdpbf16ps kernel: x rounded to bf16 (nearest-even) once, each product of
// two bf16 exact in f32, f32 sums (TDPBF16PS adds a k pair's two products into the f32 accumulator, like
// vdpbf16ps). One TDPBF16PS is a 16 × 16 × 32 block, 8192 multiply-adds: on Sapphire Rapids about 16× the
// rate of an f32 FMA per core. Blocks of 32 rows × 32 columns of Y in four accumulator tiles (two x tiles,
// two weight tiles: the 8 tile registers). The blocking is fixed, so the result does not depend on the
// thread count.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_pack.h"
#include "backend/cpu/gemm.h"
#include "core/runtime_switch.h"
#include "core/thread_pool.h"

#if MB_HAVE_X86_SIMD && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define MB_HAVE_AMX 1
#else
#define MB_HAVE_AMX 0
#endif

namespace mb::cpu {

#if MB_HAVE_AMX
namespace {

#define MB_AMX_TARGET \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16,avx2,fma,f16c")))

constexpr int64_t kTileRows = 16;           // rows of every tile; each row 64 bytes (32 bf16 or 16 f32)
constexpr int64_t kTileK = 32;              // k per x tile (16 pairs per weight tile)
constexpr int64_t kBlock = 32;              // rows and columns of Y per block (2 × 2 tiles)
// k per slice: a block's 16 KB weight panel stays in L1 beside the 16 KB of x tiles it reads (512: ~15% slower
// at 256 × 1536 × 6144, 128 slower too).
constexpr int64_t kKC = 256;

// x rounded and packed once: per k slice (padded to whole tiles, kcp), groups of 16 rows, each a run of
// 16 × 32 bf16 tiles (1 KB, row stride 64 bytes) along k. Rows past M and k past K are zero.
struct PackedTiles {
  std::vector<uint16_t> values;
  int64_t padded_m = 0;
  // The first tile of row group g in the slice starting at k0 (kcp: that slice's padded length).
  const uint16_t* group(int64_t k0, int64_t kcp, int64_t g) const {
    return values.data() + k0 / kTileK * kTileK * padded_m + g * kTileRows * kcp;
  }
};

int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// Row group g of x, k slice [k0, k0 + kc) rounded to bf16 into its tiles (dst: kcp / 32 tiles of 16 × 32).
MB_BF16_TARGET void pack_x_group(const float* X, int64_t M, int64_t K, int64_t g, int64_t k0, int64_t kc,
                                 uint16_t* dst) {
  const int64_t kcp = round_up(kc, kTileK);
  alignas(64) uint16_t row[kKC];
  for (int64_t i = 0; i < kTileRows; ++i) {
    const int64_t m = g * kTileRows + i;
    round_row_bf16(m < M ? X + m * K + k0 : X, m < M ? kc : 0, kcp, row);  // rows past M: zeros
    for (int64_t t = 0; t < kcp / kTileK; ++t)
      std::memcpy(dst + t * kTileRows * kTileK + i * kTileK, row + t * kTileK, kTileK * sizeof(uint16_t));
  }
}

// Tile palette 1, all eight tiles 16 rows × 64 bytes: 0-3 the f32 accumulators, 4-5 x, 6-7 weights. A constant
// in memory: GCC's _tile_loadconfig tells the compiler it reads only 8 bytes, so stores into a local
// configuration would be dropped as dead.
struct alignas(64) TileConfig {
  uint8_t palette, start_row, reserved[14];
  uint16_t bytes_per_row[16];
  uint8_t rows[16];
};
constexpr TileConfig kTileConfig{1, 0, {}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};

MB_AMX_TARGET void configure_tiles() { _tile_loadconfig(&kTileConfig); }

// A 32 × 32 block of Y (row stride ldc floats) (+)= two x row groups · one 32-row panel over kcp (whole tiles).
// xa, xb: the groups' first tiles (consecutive tiles 1 KB apart); panel: pairs [kcp / 2][32], 128-byte rows.
MB_AMX_TARGET void block_32x32(const uint16_t* xa, const uint16_t* xb, const int32_t* panel, int64_t kcp, float* c,
                               int64_t ldc, bool accumulate) {
  const int64_t stride_c = ldc * int64_t(sizeof(float));
  if (accumulate) {
    _tile_loadd(0, c, stride_c);
    _tile_loadd(1, c + 16, stride_c);
    _tile_loadd(2, c + 16 * ldc, stride_c);
    _tile_loadd(3, c + 16 * ldc + 16, stride_c);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t t = 0; t < kcp / kTileK; ++t) {
    _tile_loadd(4, xa + t * kTileRows * kTileK, 64);
    _tile_loadd(5, xb + t * kTileRows * kTileK, 64);
    const int32_t* w = panel + t * (kTileK / 2) * kBf16PanelRows;
    _tile_loadd(6, w, 128);
    _tile_loadd(7, w + 16, 128);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, stride_c);
  _tile_stored(1, c + 16, stride_c);
  _tile_stored(2, c + 16 * ldc, stride_c);
  _tile_stored(3, c + 16 * ldc + 16, stride_c);
}

MB_AMX_TARGET void release_tiles() { _tile_release(); }

// CPUID lists AMX-TILE and AMX-BF16, the OS saves the tile state (XCR0 bits 17, 18), and Linux grants this
// process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM): a VM can list the first without the last.
bool amx_granted() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = d & (1u << 22), amx_tile = d & (1u << 24);
  if (!amx_bf16 || !amx_tile || !__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;  // OSXSAVE
  uint32_t xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// 32 × 32 blocks over the shared panel loop: the block of `row` is row groups row / 16 and row / 16 + 1.
struct AmxBlocks {
  // 4 panels per task (6 for vdpbf16ps): k / v projections (N = 256) split over two threads evenly.
  static constexpr int64_t kRows = kBlock, kSliceK = kKC, kTaskPanels = 4;
  const PackedTiles& px;
  int64_t padded_k(int64_t kc) const { return round_up(kc, kTileK); }
  MB_AMX_TARGET void tile(int64_t k0, int64_t kcp, int64_t row, const int32_t* panel, float* c, int64_t ldc,
                          bool accumulate) const {
    block_32x32(px.group(k0, kcp, row / kTileRows), px.group(k0, kcp, row / kTileRows + 1), panel, kcp, c, ldc,
                accumulate);
  }
  void begin_thread() const { configure_tiles(); }
  void end_thread() const { release_tiles(); }
};

RuntimeSwitch g_amx{"MARKBASE_AMX"};

}  // namespace

bool amx_bf16_supported() {
  static const bool has = bf16_products_supported() && amx_granted();
  return has;
}

bool amx_bf16_enabled() { return amx_bf16_supported() && g_amx.enabled(); }

void set_amx_bf16(int mode) { g_amx.set(mode); }

MB_AMX_TARGET double amx_bf16_probe_seconds(int64_t steps) {
  if (!amx_bf16_supported()) return 0.0;
  alignas(64) static const uint16_t zeros[kTileRows * kTileK] = {};  // the rate does not depend on the values
  configure_tiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, zeros, 64);
  _tile_loadd(5, zeros, 64);
  _tile_loadd(6, zeros, 64);
  _tile_loadd(7, zeros, 64);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < steps; ++s) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  release_tiles();
  return seconds;
}

bool gemm_bf16_amx(int64_t M, int64_t N, int64_t K, const float* X, const bf16_t* W, const float* bias, float* Y) {
  if (!amx_bf16_enabled() || M <= 0 || N <= 0 || K <= 0 || K % 2) return false;
  const int64_t groups = round_up(M, kBlock) / kTileRows, slices = (K + kKC - 1) / kKC;
  thread_local PackedTiles px_store;  // the calling thread's; workers read it through `px`
  PackedTiles& px = px_store;
  px.padded_m = groups * kTileRows;
  const size_t packed_size = size_t(px.padded_m * round_up(K, kTileK));
  if (px.values.size() < packed_size) px.values.resize(packed_size);
  parallel_for(groups * slices, 4, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i % groups, k0 = (i / groups) * kKC, kc = std::min(kKC, K - k0);
      pack_x_group(X, M, K, g, k0, kc, const_cast<uint16_t*>(px.group(k0, round_up(kc, kTileK), g)));
    }
  });
  run_panel_gemm(AmxBlocks{px}, M, N, K, W, bias, Y);
  return true;
}

#else

bool amx_bf16_supported() { return false; }
bool amx_bf16_enabled() { return false; }
void set_amx_bf16(int) {}
bool gemm_bf16_amx(int64_t, int64_t, int64_t, const float*, const bf16_t*, const float*, float*) { return false; }
double amx_bf16_probe_seconds(int64_t) { return 0.0; }

#endif

}  // namespace mb::cpu
