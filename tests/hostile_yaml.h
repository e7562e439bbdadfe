// Hostile YAML for the config readers' tests: an alias inside its own anchor (a tree that would
// be infinite) and anchors of lists of aliases to the previous anchor (a few lines that expand to
// billions of nodes), the shapes that crashed and hung `mantissa train` before
// runner/config/yaml_tree_guard.h.
#pragma once

#include <string>

namespace mantissa::testing {

inline const char* const kYamlAliasCycle = "a: &a [*a]\n";

// `levels` + 1 anchors a0..a<levels>, each a list of `width` aliases to the one before (a0 a list
// of `width` scalars), under keys no config knows: width^(levels+1) nodes once expanded.
inline std::string yaml_alias_bomb(int levels = 10, int width = 9) {
  std::string out = "a0: &a0 [";
  for (int j = 0; j < width; ++j) out.append(j ? ", x" : "x");
  out.append("]\n");
  for (int i = 1; i <= levels; ++i) {
    const std::string n = std::to_string(i), prev = std::to_string(i - 1);
    out.append("a").append(n).append(": &a").append(n).append(" [");
    for (int j = 0; j < width; ++j) out.append(j ? ", *a" : "*a").append(prev);
    out.append("]\n");
  }
  return out;
}

}  // namespace mantissa::testing
