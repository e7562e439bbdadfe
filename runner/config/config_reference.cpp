// The key reference of docs/configs.md, made from config_schema.h: one Markdown table per
// section, so the documentation lists exactly the declared keys with their declared defaults,
// checks and types (tests/test_runner_config.cpp compares it with the file).
#include <sstream>
#include <type_traits>

#include "runner/config/config.h"
#include "runner/config/config_schema.h"
#include "runner/files/text.h"

namespace mantissa::runner {
namespace {

std::string code(const std::string& s) { return "`" + s + "`"; }

std::string text(int64_t x) { return std::to_string(x); }
std::string text(uint64_t x) { return std::to_string(x); }
std::string text(double x) { return yaml_double(x); }
std::string text(bool b) { return b ? "true" : "false"; }
std::string text(const std::optional<bool>& b) { return b ? text(*b) : "auto"; }
std::string text(const std::string& s) { return s.empty() ? "\"\"" : s; }
std::string text(DType t) { return std::string(dtype_name(t)); }
std::string text(char c) { return std::string(1, c); }
template <typename T>
std::string text(const std::vector<T>& v) {
  std::vector<std::string> s;
  for (const auto& x : v) s.push_back(text(x));
  std::string out = "[";
  out += join(s);
  out += ']';
  return out;
}
std::string text(const BlockSelection& b) {
  return b.all ? "true" : b.blocks.empty() ? "false" : text(b.blocks);
}
std::string text(const std::pair<double, double>& p) {
  return text(std::vector<double>{p.first, p.second});
}
template <size_t N>
std::string text(const std::array<double, N>& a) {
  return text(std::vector<double>(a.begin(), a.end()));
}
template <schema::NamedEnum E>
std::string text(E e) {
  return schema::enum_name(e);
}

template <typename T>
const char* type_name() {
  if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, uint64_t>) return "int";
  if constexpr (std::is_same_v<T, double>) return "float";
  if constexpr (std::is_same_v<T, bool>) return "bool";
  if constexpr (std::is_same_v<T, std::optional<bool>>) return "bool \\| `auto`";
  if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, DType> || std::is_enum_v<T>)
    return "string";
  if constexpr (std::is_same_v<T, char>) return "character";
  if constexpr (std::is_same_v<T, std::vector<std::string>>) return "string or list";
  if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "int or list";
  if constexpr (std::is_same_v<T, std::vector<double>>) return "float or list";
  if constexpr (std::is_same_v<T, std::pair<double, double>>) return "[float, float]";
  if constexpr (std::is_same_v<T, std::array<double, 3>>) return "[float, float, float]";
  if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) return "list of layers";
  if constexpr (std::is_same_v<T, BlockSelection>) return "bool or list";
  return "?";
}

std::string range_cell(const schema::Range& r) {
  if (!r.bounded()) return "";
  const bool lo = std::isfinite(r.lo), hi = std::isfinite(r.hi);
  if (lo && hi && r.hi < 1e300) {
    return std::string(r.lo_open ? "(" : "[") + text(r.lo) + ", " + text(r.hi) +
           (r.hi_open ? ")" : "]");
  }
  return lo ? std::string(r.lo_open ? "> " : ">= ") + text(r.lo)
            : std::string(r.hi_open ? "< " : "<= ") + text(r.hi);
}

// One row per key (per declaration: a key declared for two types with different defaults has a
// row for each), rules added to their key's row.
class Table {
 public:
  template <typename T>
  void field(const schema::Key<T>& k) {
    Row r;
    r.key = k.name;
    r.type = type_name<T>();
    if (!k.default_help.empty()) {
      r.def = k.default_help;
    } else if (k.is_required) {
      r.def = "required";
    } else if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) {
      r.def = "—";
    } else {
      r.def = code(text(*k.member));
      for (const auto& [type, v] : k.per_type) r.def += "; " + type + ": " + code(text(v));
    }
    std::vector<std::string> allowed;
    if (!k.choices.empty()) {
      std::vector<std::string> c;
      for (const auto& x : k.choices) c.push_back(code(x));
      allowed.push_back(join(c));
    }
    if (const std::string range = range_cell(k.range); !range.empty()) allowed.push_back(range);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (std::is_unsigned_v<T> || k.min_int == 0) allowed.push_back(">= 0");
      if (k.min_int > 0 && k.max_int == std::numeric_limits<int64_t>::max())
        allowed.push_back(">= " + text(k.min_int));
      if (k.max_int != std::numeric_limits<int64_t>::max())
        allowed.push_back("[" + text(k.min_int) + ", " + text(k.max_int) + "]");
    }
    if (!k.check_help.empty()) allowed.push_back(k.check_help);
    r.allowed = join(allowed, "; ");
    r.applies = join(k.only, ", ");
    r.help = k.help;
    rows_.push_back(std::move(r));
  }
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>& b) {
    field(a);
    field(b);
    rows_.back().help += " (not together with `" + std::string(a.name) + "`)";
  }
  void rule(const schema::Rule& r) {
    for (auto it = rows_.rbegin(); it != rows_.rend(); ++it) {
      if (it->key == r.key) {
        it->allowed += (it->allowed.empty() ? "" : "; ") + r.problem;
        return;
      }
    }
  }
  template <typename S>
  void section(const char* name, S& s, const char* help,
               const std::vector<std::string>& only = {}) {
    Table t;
    schema::describe(t, s);
    std::string text = help;
    if (!only.empty()) {
      std::vector<std::string> c;
      for (const auto& x : only) c.push_back(code(x));
      text += (text.empty() ? "" : " ") + std::string("For `type` ") + join(c) + " only.";
    }
    sections_.push_back({name, text, std::move(t.rows_), std::move(t.sections_)});
  }

  std::string markdown(const std::string& heading, const std::string& help) const {
    std::ostringstream os;
    os << heading << "\n\n";
    if (!help.empty()) os << help << "\n\n";
    os << "| key | type | default | allowed | applies to | meaning |\n";
    os << "|---|---|---|---|---|---|\n";
    for (const auto& r : rows_) {
      os << "| `" << r.key << "` | " << r.type << " | " << r.def << " | " << r.allowed << " | "
         << r.applies << " | " << r.help << " |\n";
    }
    return os.str();
  }

  struct Row {
    std::string key, type, def, allowed, applies, help;
  };
  struct Sub {
    std::string name, help;
    std::vector<Row> rows;
    std::vector<Sub> subs;  // its nested sections
  };
  std::vector<Row> rows_;
  std::vector<Sub> sections_;
};

}  // namespace

std::string config_reference_markdown() {
  Config c;
  Table top;
  schema::describe(top, c);
  std::string out = top.markdown("### Top level", "");
  const auto render = [&out](const Table::Sub& s, const std::string& path,
                             const auto& self) -> void {
    Table t;
    t.rows_ = s.rows;
    out += '\n';  // not "\n" + ...: GCC 12 misreads that as an overlapping copy (-Wrestrict)
    out += t.markdown("### `" + path + "`", s.help);
    for (const auto& sub : s.subs) self(sub, path + "." + sub.name, self);
  };
  for (const auto& s : top.sections_) {
    render(s, s.name, render);
    if (s.name == "model") {
      LayerSpec l;
      Table layers;
      schema::describe(layers, l);
      out += '\n';
      out += layers.markdown("### `model.layers` entries",
                             "A map with `type` (and optional `name`), or just the type "
                             "name for layers without required keys (`- relu`).");
    }
  }
  return out;
}

}  // namespace mantissa::runner
