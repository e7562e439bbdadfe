#include "runner/files/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "engine/error.h"

namespace mantissa::runner {
namespace {

std::string os_error() { return std::strerror(errno); }

// Closes the descriptor and removes the temporary unless release() was called: a failed write
// leaves nothing behind.
class TempFile {
 public:
  TempFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  int fd() const { return fd_; }
  void close_fd(const std::string& what) {
    const int fd = fd_;
    fd_ = -1;
    MT_CHECK(::close(fd) == 0, "writing ", what, ": close failed: ", os_error());
  }
  void release() { released_ = true; }

 private:
  std::string path_;
  int fd_;
  bool released_ = false;
};

class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() { ::close(fd_); }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::numeric_limits<uint64_t>::max();
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

void write_all(int fd, std::string_view bytes, const std::string& what) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n > 0, "writing ", what, ": write failed after ", done, " of ", bytes.size(),
             " bytes: ", os_error());
    done += static_cast<size_t>(n);
  }
}

}  // namespace

bool is_atomic_temp_name(std::string_view filename) {
  return filename.size() > 1 && filename[0] == '.' && filename.find(".tmp-") != std::string::npos;
}

std::string file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

std::string regular_file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return errno == ENOENT ? "no such file" : os_error();
  if (S_ISREG(st.st_mode)) return "";
  return "is " + file_type_name(st.st_mode) + ", not a regular file";
}

void write_file_atomically(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  MT_CHECK(!target.filename().empty(), "writing '", path, "': not a file name");
  // rename() replaces whatever node has the name: as root, "writing" /dev/full would turn the
  // device into a file. A symbolic link is replaced itself, the file it points to left alone.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    MT_CHECK(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode), "writing '", path, "': it is ",
             file_type_name(st.st_mode), ", not a regular file; refusing to replace it");
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  // Appended piecewise: GCC 12 at -O3 warns falsely (-Wrestrict) on a chain of operator+.
  std::string tmp_name = ".";
  tmp_name.append(target.filename().string());
  tmp_name.append(".tmp-");
  tmp_name.append(std::to_string(::getpid()));
  const std::string tmp = (dir / tmp_name).string();

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MT_CHECK(fd >= 0, "writing '", path, "': cannot create temporary file '", tmp, "': ", os_error());
  TempFile file(tmp, fd);
  write_all(fd, bytes, "'" + path + "'");
  // The data must be on disk before the rename makes it visible under the final name.
  MT_CHECK(::fsync(fd) == 0, "writing '", path, "': fsync failed: ", os_error());
  file.close_fd("'" + path + "'");
  MT_CHECK(::rename(tmp.c_str(), path.c_str()) == 0, "writing '", path, "': rename from '", tmp,
           "' failed: ", os_error());
  file.release();
  // And the directory entry must be on disk before we report success.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MT_CHECK(dfd >= 0, "writing '", path, "': cannot open directory '", dir.string(),
           "' to fsync it: ", os_error());
  const int rc = ::fsync(dfd);
  const std::string err = rc == 0 ? "" : os_error();
  ::close(dfd);
  MT_CHECK(rc == 0, "writing '", path, "': fsync of directory '", dir.string(), "' failed: ", err);
}

std::string read_file_bytes(const std::string& path, uint64_t max_bytes) {
  // The type from the path first: opening a FIFO blocks until a writer appears, and opening some
  // devices has side effects.
  struct stat st {};
  MT_CHECK(::stat(path.c_str(), &st) == 0, "cannot open '", path, "': ", os_error());
  MT_CHECK(S_ISREG(st.st_mode), "cannot read '", path, "': it is ", file_type_name(st.st_mode),
           ", not a regular file");
  // O_NONBLOCK: if the path became a FIFO since the stat, the open returns at once and the fstat
  // refuses it (it changes nothing for a regular file).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  MT_CHECK(fd >= 0, "cannot open '", path, "': ", os_error());
  FdCloser closer(fd);
  MT_CHECK(::fstat(fd, &st) == 0, "cannot read '", path, "': fstat failed: ", os_error());
  MT_CHECK(S_ISREG(st.st_mode), "cannot read '", path, "': it is ", file_type_name(st.st_mode),
           ", not a regular file");
  const uint64_t limit = max_bytes > 0 ? max_bytes : physical_memory_bytes();
  const std::string over = max_bytes > 0
                               ? "the limit of " + std::to_string(limit) + " bytes for this file"
                               : "this machine's physical memory (" + std::to_string(limit) +
                                     " bytes), and the file is read whole into memory";
  const auto size = static_cast<uint64_t>(st.st_size);
  MT_CHECK(size <= limit, "cannot read '", path, "': it is ", size, " bytes, more than ", over);
  std::string out;
  out.reserve(static_cast<size_t>(size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    MT_CHECK(n >= 0, "cannot read '", path, "': ", os_error());
    if (n == 0) break;
    // A file still being appended to is read only up to the limit.
    MT_CHECK(out.size() + static_cast<uint64_t>(n) <= limit, "cannot read '", path,
             "': it grew while being read to more than ", over);
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace mantissa::runner
