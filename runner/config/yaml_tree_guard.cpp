#include "runner/config/yaml_tree_guard.h"

#include <yaml-cpp/yaml.h>

#include <vector>

#include "runner/config/config.h"
#include "runner/files/text.h"

namespace mantissa::runner {
namespace {

// A key that is not a scalar, as the path shows it.
const std::string kComplexKey = "?";

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
        // The key itself, not a copy: an aliased map is visited many times.
        parts_.push_back(kv.first.IsScalar() ? &kv.first.Scalar() : &kComplexKey);
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
      path += printable_excerpt(*p, 40);
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
