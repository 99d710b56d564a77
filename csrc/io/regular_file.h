// Opening checkpoint files that must be regular files. The open is O_NONBLOCK, so a FIFO named like a
// checkpoint file opens at once (instead of waiting for a writer) and is then refused by fstat, as are
// devices (/dev/zero), directories and sockets. Symlinks are followed: the Hugging Face cache's snapshot
// files are symlinks into blobs/; what they point to must be a regular file.
#pragma once
#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace mb::io {

// A read-only (blocking) descriptor of `path`, checked to be a regular file, with its fstat in *st; -1 when
// not, with *error saying why ("cannot open: No such file or directory", "not a regular file (a FIFO)")
// and errno kept from open() (ENOENT: the file is missing).
int open_regular_file(const std::string& path, struct stat* st, std::string* error);

// The whole of the regular file `path`, refused (false, *error saying why) when it is not one, or holds
// more than max_bytes (checked before reading, and while reading: a file that grows is refused too). errno
// tells the failure apart (ENOENT: missing, EFBIG: too large).
bool read_regular_file(const std::string& path, uint64_t max_bytes, std::string* text, std::string* error);

}  // namespace mb::io
