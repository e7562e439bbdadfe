// Crash-safe file writes: the bytes go to a temporary file in the destination's directory, which
// is fsync'ed, renamed over the destination and followed by an fsync of the directory. A process
// killed at any point leaves either the old file or the complete new one under the final name
// (and possibly a stale ".<name>.tmp-<pid>" temporary, which readers ignore).
//
// Whole-file reads, for every reader in runner/ and cli/: only regular files are read. A FIFO
// would block the open until a writer appears and a device such as /dev/zero never ends, so the
// type is checked before the open and the size before the first byte is read.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace mantissa::runner {

// Refuses (before writing anything) a destination that exists and is neither a regular file nor a
// symbolic link: the rename would replace the device node, FIFO or socket itself.
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole file; throws mantissa::Error naming the path and the OS error, or what the path is
// when it is not a regular file ("is a FIFO (named pipe), not a regular file"), or its size when
// that is over `max_bytes` (0: the machine's physical memory, as the file is held in memory).
std::string read_file_bytes(const std::string& path, uint64_t max_bytes = 0);

// "" when `path` (symbolic links followed) is a regular file, else why it cannot be read as one:
// "no such file", "is a directory, not a regular file", "is a character device, not a regular
// file", or the OS error.
std::string regular_file_problem(const std::string& path);

// "a directory", "a character device", "a FIFO (named pipe)", ... for a stat() st_mode.
std::string file_type_name(mode_t mode);

// True for names write_file_atomically uses for its temporaries.
bool is_atomic_temp_name(std::string_view filename);

}  // namespace mantissa::runner
