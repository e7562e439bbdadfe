// Crash-safe file writes: the bytes go to a temporary file in the destination's directory, which
// is fsync'ed, renamed over the destination and followed by an fsync of the directory. A process
// killed at any point leaves either the old file or the complete new one under the final name
// (and possibly a stale ".<name>.tmp-<pid>" temporary, which readers ignore).
#pragma once

#include <string>
#include <string_view>

namespace mantissa::runner {

void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole file; throws mantissa::Error naming the path and the OS error.
std::string read_file_bytes(const std::string& path);

// True for names write_file_atomically uses for its temporaries.
bool is_atomic_temp_name(std::string_view filename);

}  // namespace mantissa::runner
