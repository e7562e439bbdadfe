// The shape every YAML tree must have before anything walks it: YAML's anchors and aliases make
// a tree a graph, so a walk could recurse forever through an alias inside its own anchor
// (`a: &a [*a]`) or expand a few lines into billions of nodes (anchors of lists of aliases to the
// previous anchor). check_yaml_tree walks the tree once, as every later walk would, and refuses a
// cycle, a tree deeper than kMaxYamlDepth, or one whose walk visits more than kMaxYamlNodes nodes,
// naming the key where it stopped. Configs are a few hundred nodes deep in aliases at most.
#pragma once

#include <cstddef>
#include <string>

namespace YAML {
class Node;
}

namespace mantissa::runner {

inline constexpr size_t kMaxYamlNodes = 100000;
inline constexpr size_t kMaxYamlDepth = 64;

// Throws ConfigError("config error: <source>: key '<path>': ...") naming the key path; `source`
// names the file or the --set override the tree came from, and `path` is the root's own key path
// ("" for a file, the override's key for a --set value).
void check_yaml_tree(const YAML::Node& root, const std::string& source,
                     const std::string& path = "");

}  // namespace mantissa::runner
