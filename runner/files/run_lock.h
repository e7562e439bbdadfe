// One process at a time in a run directory: two trainers appending to one metrics.jsonl and
// writing one checkpoints/ would interleave records and lose steps. The lock is an advisory
// flock on "<run_dir>/.lock", so it goes away with the process that holds it, however it ends.
#pragma once

#include <string>

#include "engine/error.h"

namespace mantissa::runner {

// Thrown when another process holds the run directory.
class RunDirInUse : public Error {
 public:
  using Error::Error;
};

class RunDirLock {
 public:
  // Takes the lock or throws RunDirInUse naming the directory and the holder's pid.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace mantissa::runner
