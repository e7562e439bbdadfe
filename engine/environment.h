// Environment variables that take one word from a fixed list: MANTISSA_STRICT_FAST_PATHS
// (engine/fast_path_stats.h), MANTISSA_CPU_BF16 and MANTISSA_CPU_SGEMM
// (engine/cpu_matmul_paths.h). Each is read once, by the setting it starts.
#pragma once

#include <initializer_list>

namespace mantissa::detail {

// The index in `words` of the variable's value. Unset or empty is 0, the first word (the
// default); any other value is 0 too, with a warning naming the variable and the words.
int env_word(const char* name, std::initializer_list<const char*> words);

}  // namespace mantissa::detail
