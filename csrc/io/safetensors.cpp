#include "io/safetensors.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/errors.h"
#include "core/file_map.h"
#include "core/host_memory.h"
#include "io/json.h"
#include "io/regular_file.h"

namespace mb::io {

namespace {

struct DTypeEntry {
  const char* name;
  size_t itemsize;
  bool computable;
  DType dtype;  // meaningful when computable
};

// Every dtype this reader accepts. U16/U64 and other safetensors dtypes are rejected on purpose; U32 is
// read only as packed bytes (MLX's quantized weights, SafetensorsFile::packed_bytes).
constexpr DTypeEntry kDTypes[] = {
    {"F64", 8, false, DType::F32},     {"F32", 4, true, DType::F32},      {"F16", 2, true, DType::F16},
    {"BF16", 2, true, DType::BF16},    {"I64", 8, true, DType::I64},      {"I32", 4, true, DType::I32},
    {"I16", 2, false, DType::F32},     {"I8", 1, false, DType::F32},      {"U8", 1, true, DType::U8},       {"U32", 4, false, DType::U8},
    {"BOOL", 1, true, DType::BOOL},    {"F8_E4M3", 1, false, DType::F32}, {"F8_E5M2", 1, false, DType::F32},
};

const DTypeEntry* find_dtype(std::string_view name) {
  for (const auto& e : kDTypes)
    if (name == e.name) return &e;
  return nullptr;
}

using json::Kind;
using json::quote_text;
using json::Value;

std::string offsets_str(uint64_t b, uint64_t e) { return cat("[", b, ", ", e, "]"); }

// Modification time in nanoseconds (macOS names the field st_mtimespec).
int64_t mtime_ns(const struct stat& st) {
#if defined(__APPLE__)
  return int64_t(st.st_mtimespec.tv_sec) * 1000000000 + st.st_mtimespec.tv_nsec;
#else
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
#endif
}

// RAII file descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

size_t safetensors_itemsize(std::string_view dtype) {
  const DTypeEntry* e = find_dtype(dtype);
  return e ? e->itemsize : 0;
}

bool safetensors_compute_dtype(std::string_view dtype, DType* out) {
  const DTypeEntry* e = find_dtype(dtype);
  if (!e || !e->computable) return false;
  *out = e->dtype;
  return true;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated on open: cannot overflow
  return n;
}

void SafetensorsFile::fail(const std::string& msg) const {
  throw CheckpointError(cat("safetensors file '", path_, "': ", msg));
}

void SafetensorsFile::fail_tensor(const std::string& name, const std::string& msg) const {
  throw CheckpointError(cat("safetensors file '", path_, "': tensor ", quote_text(name), ": ", msg));
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) {
    unregister_file_mapping(map_);
    unregister_host_region(const_cast<uint8_t*>(map_));
    ::munmap(const_cast<uint8_t*>(map_), map_size_);
  }
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  struct stat st;
  std::string error;
  Fd fd{open_regular_file(path, &st, &error)};  // a FIFO or device is refused, never waited on
  if (fd.fd < 0) f->fail(error);
  const uint64_t size = uint64_t(st.st_size);
  if (size < 8) f->fail(cat("file is ", size, " bytes, shorter than the 8-byte header length"));
  f->mtime_ns_ = mtime_ns(st);

  // The header length is checked against the file size and the maximum before anything else.
  uint8_t len_bytes[8];
  size_t got = 0;
  while (got < 8) {
    ssize_t r = ::pread(fd.fd, len_bytes + got, 8 - got, off_t(got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) f->fail(cat("cannot read the header length: ", r < 0 ? std::strerror(errno) : "unexpected end of file"));
    got += size_t(r);
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len_bytes[i];  // little-endian
  if (n > kMaxHeaderBytes)
    f->fail(cat("header length ", n, " exceeds the maximum of ", kMaxHeaderBytes, " bytes"));
  if (n > size - 8)
    f->fail(cat("header length ", n, " exceeds the ", size - 8, " bytes after the length field (file truncated?)"));
  if (n == 0) f->fail("header is empty");

  void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.fd, 0);
  if (p == MAP_FAILED) f->fail(cat("cannot map ", size, " bytes: ", std::strerror(errno)));
  f->map_ = static_cast<const uint8_t*>(p);
  f->map_size_ = size_t(size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Pages this mapping faults in from disk come as 2 MiB page-cache folios, mapped with 2 MiB entries (on
  // kernels and filesystems with large folios): decode streams the weights through this mapping, and through
  // 4 KiB entries E2B's bf16 decode step took 290 ms instead of 224. The gathered tables are read with pread()
  // (core/file_map.h), never through the mapping, so no folio is mapped for a single row.
  if (huge_pages_enabled()) ::madvise(p, size_t(size), MADV_HUGEPAGE);  // advice: ignored where unsupported
#endif
  // Recorded with its whole last page (mapped, zero past the end of file): Metal wraps it without a copy.
  register_host_region(p, (size_t(size) + host_page_size() - 1) / host_page_size() * host_page_size());
  // Kept open for gathers that read rows with pread() rather than through the mapping (core/file_map.h).
  f->fd_ = fd.fd;
  fd.fd = -1;
  register_file_mapping(p, size_t(size), f->fd_);
  f->data_start_ = size_t(8 + n);
  f->parse_header(std::string_view(reinterpret_cast<const char*>(f->map_) + 8, size_t(n)));
  return f;
}

std::string SafetensorsFile::changed_on_disk() const {
  // fstat on the descriptor kept open: the mapped file itself, wherever its path now leads (a file
  // replaced at the path or deleted is not this one, whose mapping stays whole).
  struct stat st;
  if (::fstat(fd_, &st) != 0) return cat("cannot be checked (", std::strerror(errno), ")");
  if (uint64_t(st.st_size) != map_size_)
    return cat(uint64_t(st.st_size) < map_size_ ? "truncated" : "grown", " from ", map_size_, " to ",
               uint64_t(st.st_size), " bytes");
  if (mtime_ns(st) != mtime_ns_) return "modified in place";
  return "";
}

void SafetensorsFile::parse_header(std::string_view header) {
  Value root;
  try {
    root = json::parse(header);
  } catch (const json::ParseError& e) {
    fail(cat("invalid header: ", e.what(), " at header byte ", e.offset));
  }
  if (!root.is(Kind::Object)) fail(cat("header is ", json::kind_name(root.kind), ", expected a JSON object"));
  const uint64_t data_size = map_size_ - data_start_;

  std::vector<TensorInfo> infos;
  infos.reserve(root.size());  // bounded by the (already checked) header length
  for (size_t i = 0; i < root.size(); ++i) {
    const std::string& name = root.keys()[i];
    const Value& entry = root.items()[i];
    if (name == "__metadata__") {
      if (!entry.is(Kind::Object)) fail(cat("__metadata__ is ", json::kind_name(entry.kind), ", expected an object"));
      for (size_t k = 0; k < entry.size(); ++k) {
        const Value& v = entry.items()[k];
        if (!v.is(Kind::String))
          fail(cat("__metadata__ value for key ", quote_text(entry.keys()[k]), " is ", json::kind_name(v.kind), ", expected a string"));
        metadata_.emplace(entry.keys()[k], v.str);
      }
      continue;
    }
    if (!entry.is(Kind::Object))
      fail_tensor(name, cat("entry is ", json::kind_name(entry.kind), ", expected an object with dtype, shape and data_offsets"));
    for (const std::string& field : entry.keys())
      if (field != "dtype" && field != "shape" && field != "data_offsets")
        fail_tensor(name, cat("unexpected field ", quote_text(field), " (expected exactly dtype, shape and data_offsets)"));

    TensorInfo ti;
    ti.name = name;

    const Value* dtype = entry.find("dtype");
    if (!dtype) fail_tensor(name, "missing field 'dtype'");
    if (!dtype->is(Kind::String)) fail_tensor(name, cat("dtype is ", json::kind_name(dtype->kind), ", expected a string"));
    const DTypeEntry* de = find_dtype(dtype->str);
    if (!de)
      fail_tensor(name, cat("unknown dtype ", quote_text(dtype->str),
                            " (expected one of F64 F32 F16 BF16 I64 I32 I16 I8 U8 BOOL F8_E4M3 F8_E5M2)"));
    ti.dtype = de->name;
    ti.itemsize = de->itemsize;

    const Value* shape = entry.find("shape");
    if (!shape) fail_tensor(name, "missing field 'shape'");
    if (!shape->is(Kind::Array)) fail_tensor(name, cat("shape is ", json::kind_name(shape->kind), ", expected an array"));
    if (shape->size() > kMaxRank) fail_tensor(name, cat("shape has ", shape->size(), " dimensions, more than the maximum of ", kMaxRank));
    // Product of the non-zero dimensions times the item size must fit in int64 (even for a zero-size
    // tensor, so every view of it is representable); zero dimensions make the byte count 0.
    uint64_t nonzero_bytes = ti.itemsize;
    bool has_zero = false;
    for (size_t d = 0; d < shape->size(); ++d) {
      const Value& dim = shape->items()[d];
      if (dim.is(Kind::Number) && dim.negative) fail_tensor(name, cat("shape dimension ", d, " is negative"));
      if (!dim.is_unsigned_integer()) fail_tensor(name, cat("shape dimension ", d, " is not a non-negative integer"));
      if (dim.magnitude == 0) {
        has_zero = true;
      } else if (__builtin_mul_overflow(nonzero_bytes, dim.magnitude, &nonzero_bytes) || nonzero_bytes > uint64_t(INT64_MAX)) {
        fail_tensor(name, "shape is too large: the byte size overflows");
      }
      ti.shape.push_back(int64_t(dim.magnitude));
    }
    const uint64_t nbytes = has_zero ? 0 : nonzero_bytes;

    const Value* offsets = entry.find("data_offsets");
    if (!offsets) fail_tensor(name, "missing field 'data_offsets'");
    if (!offsets->is(Kind::Array) || offsets->size() != 2 || !offsets->items()[0].is_unsigned_integer() ||
        !offsets->items()[1].is_unsigned_integer())
      fail_tensor(name, "data_offsets must be an array of two non-negative integers [begin, end]");
    ti.begin = offsets->items()[0].magnitude;
    ti.end = offsets->items()[1].magnitude;
    if (ti.begin > ti.end) fail_tensor(name, cat("data_offsets ", offsets_str(ti.begin, ti.end), " have begin > end"));
    if (ti.end > data_size)
      fail_tensor(name, cat("data_offsets ", offsets_str(ti.begin, ti.end), " lie outside the data section of ", data_size,
                            " bytes (file truncated?)"));
    if (ti.end - ti.begin != nbytes)
      fail_tensor(name, cat("dtype ", ti.dtype, " shape ", shape_str(ti.shape), " needs ", nbytes, " bytes but data_offsets ",
                            offsets_str(ti.begin, ti.end), " span ", ti.end - ti.begin));
    ti.data = map_ + data_start_ + ti.begin;
    infos.push_back(std::move(ti));
  }

  // Sorted by offset the tensors must tile the data section exactly: no overlap, no gap, no tail.
  std::sort(infos.begin(), infos.end(), [](const TensorInfo& a, const TensorInfo& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return a.name < b.name;
  });
  uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : infos) {
    if (t.begin < cursor)
      fail(cat("tensors ", quote_text(prev->name), " ", offsets_str(prev->begin, prev->end), " and ", quote_text(t.name), " ",
               offsets_str(t.begin, t.end), " overlap"));
    if (t.begin > cursor) {
      if (prev)
        fail(cat("gap of ", t.begin - cursor, " unused bytes between tensor ", quote_text(prev->name), " ",
                 offsets_str(prev->begin, prev->end), " and tensor ", quote_text(t.name), " ", offsets_str(t.begin, t.end)));
      fail(cat("data section starts with ", t.begin, " unused bytes before the first tensor ", quote_text(t.name), " ",
               offsets_str(t.begin, t.end)));
    }
    cursor = t.end;
    prev = &t;
  }
  if (cursor != data_size) {
    if (prev)
      fail(cat(data_size - cursor, " trailing bytes after the last tensor ", quote_text(prev->name), " ",
               offsets_str(prev->begin, prev->end), " (the data section has ", data_size, " bytes)"));
    fail(cat("the header lists no tensors but the data section has ", data_size, " bytes"));
  }

  infos_ = std::move(infos);
  keys_.reserve(infos_.size());
  for (size_t i = 0; i < infos_.size(); ++i) {
    keys_.push_back(infos_[i].name);
    index_.emplace(infos_[i].name, i);
  }
}

const TensorInfo& SafetensorsFile::info(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail_tensor(name, "not found in this file");
  return infos_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const TensorInfo& ti = info(name);
  DType dt;
  if (!safetensors_compute_dtype(ti.dtype, &dt))
    fail_tensor(name, cat("markbase cannot compute with dtype ", ti.dtype,
                          " (supported: F32 BF16 F16 I32 I64 U8 BOOL); its raw bytes are available through info()"));
  // Kernels load whole elements: the view must be aligned to the element size (the mapping is page aligned).
  if ((data_start_ + ti.begin) % ti.itemsize)
    fail_tensor(name, cat("data at file offset ", data_start_ + ti.begin, " is not aligned to its ", ti.itemsize, "-byte elements"));
  std::shared_ptr<void> owner = std::const_pointer_cast<SafetensorsFile>(shared_from_this());
  return Tensor::wrap_contiguous(const_cast<uint8_t*>(ti.data), dt, ti.shape, std::move(owner), StorageKind::Mapped,
                                 /*writable=*/false);
}

Tensor SafetensorsFile::packed_bytes(const std::string& name) const {
  const TensorInfo& ti = info(name);
  if (ti.dtype != "U32" && ti.dtype != "U8")
    fail_tensor(name, cat("dtype ", ti.dtype, " is not a packed integer type (expected U32 or U8)"));
  // Read as bytes: no alignment needed (MLX's writer does not align its tensors).
  Shape shape = ti.shape;
  if (shape.empty()) shape.push_back(1);
  shape.back() *= int64_t(ti.itemsize);  // little-endian words: byte j of word i is byte 4i + j
  std::shared_ptr<void> owner = std::const_pointer_cast<SafetensorsFile>(shared_from_this());
  return Tensor::wrap_contiguous(const_cast<uint8_t*>(ti.data), DType::U8, shape, std::move(owner), StorageKind::Mapped,
                                 /*writable=*/false);
}

void SafetensorsFile::release(const std::string& name) const {
  const TensorInfo& ti = info(name);
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (uintptr_t(ti.data) + page - 1) / page * page;        // whole pages inside the tensor only:
  const uintptr_t e = (uintptr_t(ti.data) + (ti.end - ti.begin)) / page * page;  // neighbours keep theirs
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

}  // namespace mb::io
