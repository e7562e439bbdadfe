// Where a command may write its output file. `mantissa export` and `mantissa plot -o` write
// through write_file_atomically, whose rename replaces whatever has the target's name: a device
// node, a symbolic link, the checkpoint the command just read. check_output_target is asked
// first, so a refused target costs one line on stderr and leaves every file as it was.
#pragma once

#include <string>
#include <vector>

#include "engine/error.h"

namespace mantissa::runner {

// A target the command must not write; the CLI reports it as a usage error (exit code 2).
class OutputRefused : public Error {
 public:
  using Error::Error;
};

// Throws OutputRefused, naming `path` and why, when writing `path` would replace:
//  - anything that is neither a regular file nor a symbolic link (directory, device node, FIFO,
//    socket): always, `force` or not;
//  - a symbolic link, unless `force`; with it the link itself is replaced by the new file, and
//    the file it pointed to is left as it was (never written through the link);
//  - a file of a run, unless `force`: resolved.yaml, metrics.jsonl, train.log, summary.json and
//    .lock of a run directory (one holding resolved.yaml, or a directory in `inputs`), anything
//    in its checkpoints/, and any of `inputs` itself (the files the command reads; compared by
//    identity, so other spellings and hard links count). Refused whether or not it exists yet:
//    a file written there is one the run later overwrites, or mistakes for its own.
void check_output_target(const std::string& path, const std::vector<std::string>& inputs,
                         bool force);

}  // namespace mantissa::runner
