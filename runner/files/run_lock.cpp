#include "runner/files/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

namespace mantissa::runner {

RunDirLock::RunDirLock(const std::string& run_dir) {
  const std::string path = (std::filesystem::path(run_dir) / ".lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MT_CHECK(fd_ >= 0, "run directory ", run_dir, ": cannot open lock file '", path,
           "': ", std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char pid[32] = {};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      const std::string holder = n > 0 ? std::string(pid, static_cast<size_t>(n)) : "unknown";
      throw RunDirInUse("run directory " + run_dir +
                        " is in use by another mantissa process (pid " + holder +
                        "); wait for it to finish or stop it first");
    }
    MT_THROW("run directory ", run_dir, ": cannot lock '", path, "': ", std::strerror(err));
  }
  // The holder's pid, for the message above; best effort (the lock itself is what counts).
  const std::string pid = std::to_string(::getpid());
  if (::ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t written = ::pwrite(fd_, pid.data(), pid.size(), 0);
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace mantissa::runner
