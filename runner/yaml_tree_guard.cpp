#include "runner/yaml_tree_guard.h"

#include <yaml-cpp/yaml.h>

#include <vector>

#include "runner/config.h"

namespace mantissa::runner {
namespace {

// Keys go into the message: anything but printable ASCII is shown as '?'.
std::string printable(std::string s) {
  for (char& c : s) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s;
}

class Walk {
 public:
  explicit Walk(const std::string& source) : source_(source) {}

  void visit(const YAML::Node& node, const std::string& path) {
    if (++visited_ > kMaxYamlNodes) {
      fail(path, "the YAML expands to more than " + std::to_string(kMaxYamlNodes) +
                     " nodes (aliases that repeat aliases?); a config is far smaller");
    }
    if (!node.IsMap() && !node.IsSequence()) return;
    // An alias of an enclosing node makes the tree infinite.
    for (const YAML::Node& ancestor : stack_) {
      if (ancestor.is(node)) fail(path, "an alias refers to a node that contains it (a cycle)");
    }
    if (stack_.size() >= kMaxYamlDepth) {
      fail(path, "nested more than " + std::to_string(kMaxYamlDepth) + " levels deep");
    }
    stack_.push_back(node);
    if (node.IsMap()) {
      for (const auto& kv : node) {
        const std::string key = kv.first.IsScalar() ? printable(kv.first.Scalar()) : "?";
        const std::string child = path.empty() ? key : path + "." + key;
        visit(kv.first, child);
        visit(kv.second, child);
      }
    } else {
      size_t i = 0;
      for (const auto& e : node) visit(e, (path.empty() ? "" : path + ".") + std::to_string(i++));
    }
    stack_.pop_back();
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    std::string where = source_;
    if (!path.empty()) {
      where += ": key '" + (path.size() > 200 ? path.substr(0, 200) + "..." : path) + "'";
    }
    throw ConfigError("config error: " + where + ": " + why);
  }

  const std::string& source_;
  std::vector<YAML::Node> stack_;
  size_t visited_ = 0;
};

}  // namespace

void check_yaml_tree(const YAML::Node& root, const std::string& source, const std::string& path) {
  Walk(source).visit(root, path);
}

}  // namespace mantissa::runner
