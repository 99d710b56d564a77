// Strict, memory-mapped safetensors reader.
//
// File layout: [u64 little-endian N][N bytes of UTF-8 JSON header][data section]. The header maps
// tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data
// section) plus an optional "__metadata__" object of string -> string.
//
// open() validates everything before any tensor is handed out; every rejection is a CheckpointError
// naming the file (and the tensor where there is one). After a successful open every tensor's bytes
// lie inside the mapping, the tensors tile the data section exactly (sorted by offset: no gap, no
// overlap, starting at 0, ending at the file's end), and prod(shape) * itemsize == end - begin.
// Nothing is allocated in proportion to a size the file claims before that size has been checked
// against the real file size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace mb::io {

// Largest accepted header (the JSON part); larger claims are rejected before reading anything.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // 100 MiB
// Largest accepted tensor rank (numpy's limit; no model needs more).
constexpr size_t kMaxRank = Dims::kMaxDims;  // markbase tensors hold their shape inline (core/dims.h)

struct TensorInfo {
  std::string name;
  std::string dtype;      // as written in the file: "F32", "BF16", "F8_E4M3", ...
  size_t itemsize = 0;    // bytes per element of `dtype`
  Shape shape;
  uint64_t begin = 0;     // [begin, end): byte range relative to the start of the data section
  uint64_t end = 0;
  const uint8_t* data = nullptr;  // first byte of the tensor inside the mapping (valid for nbytes())
  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype string, or 0 for an unknown one.
size_t safetensors_itemsize(std::string_view dtype);
// True (and sets *out) when markbase can compute with the dtype: F32 BF16 F16 I32 I64 U8 BOOL.
bool safetensors_compute_dtype(std::string_view dtype, DType* out);

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Maps and validates the file; throws CheckpointError naming it on any problem.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names in file order: sorted by data offset (ties, i.e. zero-size tensors, by name).
  const std::vector<std::string>& keys() const { return keys_; }
  size_t size() const { return infos_.size(); }
  bool contains(const std::string& name) const { return index_.count(name) != 0; }
  // Throws CheckpointError naming the file and tensor when absent.
  const TensorInfo& info(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Read-only zero-copy view (StorageKind::Mapped) that keeps this file mapped. Throws
  // CheckpointError for dtypes markbase cannot compute with (F64 I16 I8 F8_E4M3 F8_E5M2; their bytes
  // stay reachable through info()) and for data not aligned to the element size.
  Tensor tensor(const std::string& name) const;
  // A U32 (or U8) tensor's bytes as a read-only U8 view [..., last·itemsize] (MLX-packed weights).
  Tensor packed_bytes(const std::string& name) const;
  // Drops this process's mapping of the tensor's whole pages (its data stays in the file and the page
  // cache): after quantizing a matrix at load, its source no longer counts toward resident memory.
  void release(const std::string& name) const;

  // The whole mapping (header included), for bounds checks.
  const uint8_t* mapping() const { return map_; }
  size_t mapping_size() const { return map_size_; }
  // Offset of the data section from the start of the file (8 + header length).
  size_t data_start() const { return data_start_; }
  // What changed in the file under the mapping since open ("" when nothing): the same file (inode)
  // truncated, grown or modified. Reading a truncated file's lost pages would be a SIGBUS; a modified one
  // mixes old and new weights. A file replaced at the path (a new inode) or deleted is not a change:
  // the mapping keeps the old one whole. One fstat of the kept descriptor (follows the file if renamed):
  // cheap enough for every forward.
  std::string changed_on_disk() const;

 private:
  SafetensorsFile() = default;
  void parse_header(std::string_view header);
  [[noreturn]] void fail(const std::string& msg) const;
  [[noreturn]] void fail_tensor(const std::string& name, const std::string& msg) const;

  std::string path_;
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
  int fd_ = -1;  // the mapped file, open for pread() gathers (core/file_map.h)
  size_t data_start_ = 0;
  int64_t mtime_ns_ = 0;
  std::vector<TensorInfo> infos_;  // in keys() order
  std::vector<std::string> keys_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mb::io
