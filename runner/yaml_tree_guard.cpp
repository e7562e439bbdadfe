#include "runner/yaml_tree_guard.h"

#include <yaml-cpp/yaml.h>

#include <vector>

#include "runner/config.h"

namespace mantissa::runner {
namespace {

// Keys go into the message: anything but printable ASCII is shown as '?', and a long key is cut.
std::string printable(const std::string& key) {
  std::string s = key.size() > 40 ? key.substr(0, 40) + "..." : key;
  for (char& c : s) {
    if (c < 0x20 || c > 0x7e) c = '?';
  }
  return s;
}

class Walk {
 public:
  Walk(const std::string& source, const std::string& root_path) : source_(source) {
    if (!root_path.empty()) parts_.push_back(&root_path);
  }

  void visit(const YAML::Node& node) {
    if (++visited_ > kMaxYamlNodes) {
      fail("the YAML expands to more than " + std::to_string(kMaxYamlNodes) +
           " nodes (aliases that repeat aliases?); a config is far smaller");
    }
    if (!node.IsMap() && !node.IsSequence()) return;
    // An alias of an enclosing node makes the tree infinite.
    for (const YAML::Node& ancestor : stack_) {
      if (ancestor.is(node)) fail("an alias refers to a node that contains it (a cycle)");
    }
    if (stack_.size() >= kMaxYamlDepth) {
      fail("nested more than " + std::to_string(kMaxYamlDepth) + " levels deep");
    }
    stack_.push_back(node);
    if (node.IsMap()) {
      for (const auto& kv : node) {
        const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "?";
        parts_.push_back(&key);
        visit(kv.first);
        visit(kv.second);
        parts_.pop_back();
      }
    } else {
      size_t i = 0;
      for (const auto& e : node) {
        const std::string index = std::to_string(i++);
        parts_.push_back(&index);
        visit(e);
        parts_.pop_back();
      }
    }
    stack_.pop_back();
  }

 private:
  // The key path is joined only here: building it at every visit would cost visits x its length.
  [[noreturn]] void fail(const std::string& why) const {
    std::string path;
    for (const std::string* p : parts_) {
      if (path.size() > 200) {
        path += "...";
        break;
      }
      if (!path.empty()) path += '.';
      path += printable(*p);
    }
    std::string msg = "config error: " + source_;
    if (!path.empty()) msg.append(": key '").append(path).append("'");
    throw ConfigError(msg.append(": ").append(why));
  }

  const std::string& source_;
  std::vector<YAML::Node> stack_;
  std::vector<const std::string*> parts_;  // the key path of the node being visited
  size_t visited_ = 0;
};

}  // namespace

void check_yaml_tree(const YAML::Node& root, const std::string& source, const std::string& path) {
  Walk(source, path).visit(root);
}

}  // namespace mantissa::runner
