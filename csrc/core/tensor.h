// Tensor: a typed, strided view of bytes that someone owns (heap, arena, mapped file or a numpy array).
// Row-major, dimension order as in numpy / Hugging Face. Strides and offset are in elements.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dims.h"
#include "core/dtype.h"

namespace mb {

using Shape = Dims;

enum class StorageKind : uint8_t {
  Owned,     // heap allocation made by Tensor::empty
  Arena,     // slice of an Arena (valid until the arena is reset)
  Mapped,    // read-only view into a memory-mapped file
  External,  // memory owned by someone else (a numpy array), kept alive by `owner`
};

class Tensor {
 public:
  Tensor() = default;

  // Owning, 64-byte aligned, uninitialised.
  static Tensor empty(DType dtype, const Shape& shape);
  static Tensor zeros(DType dtype, const Shape& shape);
  // Wraps memory someone else owns; `owner` keeps it alive as long as any view exists.
  static Tensor wrap(void* data, DType dtype, const Shape& shape, Dims strides,
                     std::shared_ptr<void> owner, StorageKind kind, bool writable = true);
  static Tensor wrap_contiguous(void* data, DType dtype, const Shape& shape,
                                std::shared_ptr<void> owner, StorageKind kind, bool writable = true);

  bool defined() const { return base_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Dims& strides() const { return strides_; }
  int64_t dim() const { return int64_t(shape_.size()); }
  // Negative indices count from the end, as in numpy.
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_itemsize(dtype_) / size_t(dtype_block_size(dtype_)); }
  int64_t offset() const { return offset_; }
  StorageKind kind() const { return kind_; }
  bool writable() const { return writable_; }
  bool is_contiguous() const;
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Address of element 0 of this view.
  void* data() const { return static_cast<char*>(base_) + offset_ * int64_t(dtype_itemsize(dtype_)); }
  template <class T> T* data_as() const { return static_cast<T*>(data()); }

  // Views (no copy). reshape requires a contiguous tensor; -1 infers one dimension.
  Tensor reshape(const Shape& shape) const;
  Tensor slice(int64_t dim, int64_t start, int64_t stop) const;  // [start, stop) along dim
  Tensor select(int64_t dim, int64_t index) const;               // drops dim
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const Dims& order) const;
  // Copies into a fresh contiguous tensor (returns *this when already contiguous).
  Tensor contiguous() const;
  // Copy with dtype conversion between f32 / bf16 / f16 (and same-type copies of any dtype).
  Tensor to(DType dtype) const;
  Tensor clone() const;

  std::string describe() const;  // "bf16[2, 3]"

 private:
  void* base_ = nullptr;
  std::shared_ptr<void> owner_;
  DType dtype_ = DType::F32;
  Shape shape_;
  Dims strides_;
  int64_t offset_ = 0;
  StorageKind kind_ = StorageKind::Owned;
  bool writable_ = true;
};

Dims contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);
// Elementwise strided copy with dtype conversion (float types) or raw copy (same dtype).
void copy_into(const Tensor& src, Tensor& dst);
// Byte range [lo, hi) a tensor's elements can touch (any strides, negative ones too).
void byte_span(const Tensor& t, const char** lo, const char** hi);

}  // namespace mb
