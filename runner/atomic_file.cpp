#include "runner/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

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

void write_file_atomically(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  MT_CHECK(!target.filename().empty(), "writing '", path, "': not a file name");
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

std::string read_file_bytes(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(fd >= 0, "cannot open '", path, "': ", os_error());
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = os_error();
      ::close(fd);
      MT_THROW("cannot read '", path, "': ", err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace mantissa::runner
