#include "io/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/errors.h"

namespace mb::io {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

}  // namespace

int open_regular_file(const std::string& path, struct stat* st, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int saved = errno;
    *error = cat("cannot open: ", std::strerror(saved));
    errno = saved;
    return -1;
  }
  if (::fstat(fd, st) != 0) {
    const int saved = errno;
    *error = cat("cannot stat: ", std::strerror(saved));
    ::close(fd);
    errno = saved;
    return -1;
  }
  if (!S_ISREG(st->st_mode)) {
    *error = cat("not a regular file (", kind_of(st->st_mode), ")");
    ::close(fd);
    errno = EINVAL;
    return -1;
  }
  // Regular files ignore O_NONBLOCK; cleared so later reads are plainly blocking.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

bool read_regular_file(const std::string& path, uint64_t max_bytes, std::string* text, std::string* error) {
  struct stat st {};
  const int fd = open_regular_file(path, &st, error);
  if (fd < 0) return false;
  const uint64_t size = uint64_t(st.st_size);
  if (size > max_bytes) {
    ::close(fd);
    *error = cat("file is ", size, " bytes, more than the maximum of ", max_bytes);
    errno = EFBIG;
    return false;
  }
  // One byte past the stated size: a file that grew since fstat is seen, and refused past max_bytes.
  text->assign(size_t(size) + 1, '\0');
  size_t got = 0;
  for (;;) {
    if (got == text->size()) {
      if (got > max_bytes) break;
      text->resize(std::min<uint64_t>(uint64_t(got) * 2, max_bytes + 1));
    }
    const ssize_t r = ::read(fd, text->data() + got, text->size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int saved = errno;
      *error = cat("cannot read: ", std::strerror(saved));
      ::close(fd);
      errno = saved;
      return false;
    }
    if (r == 0) break;
    got += size_t(r);
  }
  ::close(fd);
  if (got > max_bytes) {
    *error = cat("file grew past the maximum of ", max_bytes, " bytes while it was read");
    errno = EFBIG;
    return false;
  }
  text->resize(got);
  return true;
}

}  // namespace mb::io
