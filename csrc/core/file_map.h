// Mapped checkpoint files by address, so a gather can read a few rows of a mapped table with pread()
// instead of through the mapping. Reading a byte through a file mapping maps the whole page-cache folio
// that holds it, and on kernels with large folios (Linux 6.x on ext4 / XFS) a folio is up to 2 MiB: a
// table gathered one row per token (the PLE table, 4.7 GB in E2B) would then grow the resident set by up
// to a folio per distinct token, whatever the rows' size. Rows read with pread() are copied from the page
// cache and never mapped.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace mb {

struct MappedFile {
  int fd = -1;                     // open for reading while the mapping is registered
  const uint8_t* base = nullptr;  // the mapping of file offset 0
  size_t bytes = 0;               // the mapping's length
};

// Records / forgets a read-only mapping of a whole file (offset 0 at `base`). Mappings never overlap.
void register_file_mapping(const void* base, size_t bytes, int fd);
void unregister_file_mapping(const void* base);

// The registered mapping containing p, if any. The caller keeps the mapping's owner alive while it reads.
bool find_file_mapping(const void* p, MappedFile* out);

// Copies [p, p + n), which lies inside `file`'s mapping, into dst with pread(); with memcpy through the
// mapping if pread fails (the bytes are the same either way).
void read_mapped(const MappedFile& file, const void* p, size_t n, void* dst);

// A table's rows (row r at data + r·row_bytes) for a gather: in place, or read with pread() into the
// caller's buffer when the table lies in a registered file mapping.
class TableRows {
 public:
  TableRows(const void* data, size_t row_bytes)
      : data_(static_cast<const uint8_t*>(data)), row_bytes_(row_bytes), from_file_(find_file_mapping(data, &file_)) {}
  const uint8_t* row(int64_t r, std::vector<uint8_t>& buf) const {
    const uint8_t* p = data_ + size_t(r) * row_bytes_;
    if (!from_file_) return p;
    buf.resize(row_bytes_);
    read_mapped(file_, p, row_bytes_, buf.data());
    return buf.data();
  }

 private:
  const uint8_t* data_;
  size_t row_bytes_;
  MappedFile file_;
  bool from_file_;
};

}  // namespace mb
