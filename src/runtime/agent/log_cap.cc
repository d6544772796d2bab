#include "runtime/agent/log_cap.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace gandiva::runtime {

int64_t NextData(int fd, int64_t offset, int64_t size) {
  if (offset >= size) return offset;
  const off_t at = lseek(fd, static_cast<off_t>(offset), SEEK_DATA);
  if (at < 0) {
    // ENXIO: only a hole from there to the end. Anything else (no SEEK_DATA
    // here): read on as if it were all data.
    return errno == ENXIO ? size : offset;
  }
  return static_cast<int64_t>(at);
}

core::StatusOr<int64_t> CapLog(const std::string& path, int64_t max_bytes) {
  if (max_bytes <= 0) return int64_t{0};
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return int64_t{0};
    return core::IoError("opening " + path + ": " + std::strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return core::IoError("fstat " + path + ": " + std::strerror(e));
  }
  const int64_t size = st.st_size;
  const int64_t first = NextData(fd, 0, size);
  int64_t dropped = 0;
  if (size - first > max_bytes) {
    constexpr int64_t kBlock = 4096;
    const int64_t end = (size - max_bytes / 2) / kBlock * kBlock;
    if (end > first && fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                 0, static_cast<off_t>(end)) != 0) {
      const int e = errno;
      close(fd);
      return core::IoError("dropping the oldest output of " + path +
                           " (fallocate PUNCH_HOLE): " + std::strerror(e));
    }
    dropped = std::max<int64_t>(0, end - first);
  }
  close(fd);
  return dropped;
}

}  // namespace gandiva::runtime
