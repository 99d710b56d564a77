#include "core/file_map.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include <unistd.h>

namespace mb {

namespace {

struct FileMaps {
  std::mutex mu;
  std::map<uintptr_t, MappedFile> by_base;  // ordered by base address: lookup is upper_bound - 1
};

FileMaps& file_maps() {
  static FileMaps* m = new FileMaps();  // never destroyed: files may be unmapped during static teardown
  return *m;
}

}  // namespace

void register_file_mapping(const void* base, size_t bytes, int fd) {
  FileMaps& m = file_maps();
  std::lock_guard<std::mutex> lock(m.mu);
  m.by_base[uintptr_t(base)] = MappedFile{fd, static_cast<const uint8_t*>(base), bytes};
}

void unregister_file_mapping(const void* base) {
  FileMaps& m = file_maps();
  std::lock_guard<std::mutex> lock(m.mu);
  m.by_base.erase(uintptr_t(base));
}

bool find_file_mapping(const void* p, MappedFile* out) {
  FileMaps& m = file_maps();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.by_base.upper_bound(uintptr_t(p));
  if (it == m.by_base.begin()) return false;
  --it;
  if (uintptr_t(p) - it->first >= it->second.bytes) return false;
  *out = it->second;
  return true;
}

void read_mapped(const MappedFile& file, const void* p, size_t n, void* dst) {
  const off_t offset = off_t(static_cast<const uint8_t*>(p) - file.base);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(file.fd, static_cast<uint8_t*>(dst) + done, n - done, offset + off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += size_t(r);
  }
  if (done < n) std::memcpy(static_cast<uint8_t*>(dst) + done, static_cast<const uint8_t*>(p) + done, n - done);
}

}  // namespace mb
