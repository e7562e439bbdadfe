// YAML -> Config with validation (see config.h), walking the declarations of config_schema.h. The
// YAML tree is read section by section; a Section knows every key its schema has, so a typo is
// reported with the nearest valid key before any value is looked at, and a key that exists but
// does not apply to the chosen type (an Adam option under `type: sgd`) is reported as such at the
// end of the section.
#include "runner/config/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "engine/device.h"
#include "runner/config/config_paths.h"
#include "runner/config/config_schema.h"
#include "runner/config/yaml_tree_guard.h"
#include "runner/files/atomic_file.h"
#include "runner/files/text.h"

namespace mantissa::runner {

void OptimizerConfig::select() {
  schema::select_variant(options, type, kOptimizerTypes, "optimizer", "an optimizer");
}

std::vector<int64_t> BlockSelection::indices(int64_t n) const {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    if (all || std::find(blocks.begin(), blocks.end(), i) != blocks.end()) out.push_back(i);
  }
  return out;
}

void DataConfig::select() {
  schema::select_variant(options, type, kDataTypes, "data", "a dataset");
}

std::string DataConfig::val_path() const {
  const auto* t = std::get_if<TokensBinDataOptions>(&options);
  return t != nullptr ? t->val_path : std::string();
}

std::string DataConfig::tokenizer() const {
  const auto* t = std::get_if<TokensBinDataOptions>(&options);
  return t != nullptr ? t->tokenizer : std::string();
}

int64_t DataConfig::val_blocks() const {
  return std::visit(
      [](const auto& o) -> int64_t {
        if constexpr (requires { o.val_blocks; }) {
          return o.val_blocks;
        } else {
          return 0;
        }
      },
      options);
}

void LayerSpec::select() {
  schema::select_variant(options, type, kLayerTypes, "model.layers", "a layer type");
}

void LossConfig::select() { schema::select_variant(options, type, kLossTypes, "loss", "a loss"); }

void ScheduleConfig::select() {
  schema::select_variant(options, type, kScheduleTypes, "schedule", "a schedule");
}

double OptimizerConfig::lr() const {
  return std::visit([](const auto& o) { return o.lr; }, options);
}

double OptimizerConfig::weight_decay() const {
  return std::visit([](const auto& o) { return o.weight_decay; }, options);
}

std::string Config::describe(const std::string& path) const {
  const auto v = value_text.find(path);
  const auto o = origin.find(path);
  const bool set = o != origin.end() && o->second != "default";
  if (!set && o != origin.end()) {
    // Not in the file: say so, rather than print an empty value as if it had been written.
    const std::string text = v == value_text.end() ? "" : v->second;
    if (text.empty() || text == "\"\"" || text == "none" || text == "[]" || text == "{}")
      return path + " (not set)";
    return path + " = " + text + " (not set: the default)";
  }
  std::string out = path;
  if (v != value_text.end()) out += " = " + v->second;
  if (set) out += " (" + o->second + ")";
  return out;
}

void Config::fail(const std::string& path, const std::string& problem) const {
  throw ConfigError("config error: " + describe(path) + ": " + problem);
}

std::string nearest_key(const std::string& key, const std::vector<std::string>& candidates) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        const size_t cost = std::tolower(a[i - 1]) == std::tolower(b[j - 1]) ? 0 : 1;
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
        diag = up;
      }
    }
    return row[b.size()];
  };
  std::string best;
  size_t best_d = std::numeric_limits<size_t>::max();
  for (const auto& c : candidates) {
    const size_t d = distance(key, c);
    if (d < best_d) best_d = d, best = c;
  }
  // Close enough to be a typo: a third of the longer word, at least 2 edits.
  const size_t limit = std::max<size_t>(2, std::max(key.size(), best.size()) / 3);
  return best_d <= limit ? best : "";
}

namespace {

// Where values came from: a line of the file, or a --set override.
struct Context {
  Config& cfg;
  std::vector<std::string> override_paths;

  std::string where(const std::string& path, const YAML::Node& node) const {
    for (const auto& o : override_paths) {
      if (path == o || path.rfind(o + ".", 0) == 0) return "--set";
    }
    const YAML::Mark m = node.Mark();
    if (m.is_null()) return cfg.source;
    return "line " + std::to_string(m.line + 1);
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw ConfigError("config error: " + printable(msg));
  }
  // A config that is not text (a binary file given by mistake) must not put raw bytes on the
  // terminal: control bytes and bytes that are not UTF-8 are shown as \xNN.
  static std::string printable(const std::string& text) {
    static const char* hex = "0123456789abcdef";
    std::string out;
    for (size_t i = 0; i < text.size();) {
      const auto b = static_cast<unsigned char>(text[i]);
      const size_t len = b < 0x80         ? 1
                         : (b >> 5) == 6  ? 2
                         : (b >> 4) == 14 ? 3
                         : (b >> 3) == 30 ? 4
                                          : 0;
      bool ok = len > 0 && i + len <= text.size() && (len > 1 || (b >= 0x20 && b != 0x7f));
      for (size_t k = 1; ok && k < len; ++k)
        ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 2;
      if (ok) {
        out.append(text, i, len);
        i += len;
      } else {
        out += "\\x";
        out += hex[b >> 4];
        out += hex[b & 15];
        ++i;
      }
    }
    return out;
  }
};

// yaml-cpp reads a quoted scalar whose closing quote is missing to the end of the file, folding
// the lines that follow into it. No config value spans lines, so a quoted scalar whose closing
// quote is not on its own line is refused as an unterminated quote.
// Each scalar's text is scanned once however many aliases reach it (`checked`: its positions).
void check_quotes_once(const Context& ctx, const YAML::Node& node, const std::string& text,
                       const std::string& source, std::set<size_t>& checked) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      check_quotes_once(ctx, kv.first, text, source, checked);
      check_quotes_once(ctx, kv.second, text, source, checked);
    }
    return;
  }
  if (node.IsSequence()) {
    for (const auto& e : node) check_quotes_once(ctx, e, text, source, checked);
    return;
  }
  if (!node.IsScalar() || node.Mark().is_null()) return;
  const auto pos = static_cast<size_t>(node.Mark().pos);
  if (pos >= text.size() || (text[pos] != '"' && text[pos] != '\'')) return;
  if (!checked.insert(pos).second) return;
  const char quote = text[pos];
  bool closed = false;
  for (size_t i = pos + 1; i < text.size() && text[i] != '\n'; ++i) {
    if (quote == '"' && text[i] == '\\') {
      ++i;  // an escaped character
    } else if (text[i] == quote) {
      if (quote == '\'' && i + 1 < text.size() && text[i + 1] == '\'') {
        ++i;  // '' is an escaped single quote
      } else {
        closed = true;
        break;
      }
    }
  }
  if (!closed) {
    ctx.fail(source + " line " + std::to_string(node.Mark().line + 1) +
             ": unterminated quote (the closing " + std::string(1, quote) +
             " is missing on that line)");
  }
}

void check_quotes(const Context& ctx, const YAML::Node& node, const std::string& text,
                  const std::string& source) {
  std::set<size_t> checked;
  check_quotes_once(ctx, node, text, source, checked);
}

std::string node_text(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsScalar()) return n.Scalar().empty() ? "\"\"" : n.Scalar();
  if (n.IsSequence()) return "a list";
  return "a map";
}

std::string range_text(const schema::Range& r) {
  const bool has_lo = std::isfinite(r.lo), has_hi = std::isfinite(r.hi);
  if (has_lo && has_hi) {
    return std::string("must be in ") + (r.lo_open ? "(" : "[") + yaml_double(r.lo) + ", " +
           yaml_double(r.hi) + (r.hi_open ? ")" : "]");
  }
  if (has_lo) return std::string("must be ") + (r.lo_open ? "> " : ">= ") + yaml_double(r.lo);
  if (has_hi) return std::string("must be ") + (r.hi_open ? "< " : "<= ") + yaml_double(r.hi);
  return "must be finite";
}

// One YAML map of the schema: refuses unknown and duplicate keys up front, hands out the nodes
// of the keys that apply, and at the end refuses keys given that do not apply.
class Section {
 public:
  Section(Context& ctx, const YAML::Node& node, std::string path, std::vector<std::string> keys)
      : ctx_(ctx), node_(node), path_(std::move(path)), keys_(std::move(keys)) {
    if (!node_.IsDefined() || node_.IsNull()) return;
    if (!node_.IsMap()) {
      ctx_.fail(label() + " = " + node_text(node_) + " (" + ctx_.where(path_, node_) +
                "): expected a map of keys");
    }
    std::set<std::string> seen;
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      const std::string full = sub(key);
      if (!seen.insert(key).second) {
        ctx_.fail("duplicate key '" + full + "' at " + ctx_.where(full, kv.first));
      }
      if (std::find(keys_.begin(), keys_.end(), key) == keys_.end()) {
        const std::string near = nearest_key(key, keys_);
        // The value too (when it is one), so the message names key, value and line.
        const std::string value =
            kv.second.IsScalar() ? " (value " + node_text(kv.second) + ")" : "";
        ctx_.fail("unknown key '" + full + "' at " + ctx_.where(full, kv.first) + value +
                  (near.empty() ? " — valid keys here: " + join(keys_)
                                : " — did you mean '" + sub(near) + "'?"));
      }
    }
  }

  // The key's node if present and not null (marks the key as used).
  std::optional<YAML::Node> take(const std::string& key) {
    used_.insert(key);
    if (!node_.IsDefined() || !node_.IsMap()) return std::nullopt;
    YAML::Node v = node_[key];
    if (!v.IsDefined() || v.IsNull()) return std::nullopt;
    return v;
  }
  bool has(const std::string& key) const {
    return node_.IsDefined() && node_.IsMap() && node_[key].IsDefined() && !node_[key].IsNull();
  }
  YAML::Node at(const std::string& key) const {
    return node_.IsDefined() && node_.IsMap() ? node_[key] : YAML::Node();
  }

  [[noreturn]] void bad(const std::string& key, const YAML::Node& v, const std::string& problem) {
    const std::string full = sub(key);
    ctx_.fail(full + " = " + node_text(v) + " (" + ctx_.where(full, v) + "): " + problem);
  }

  // A number or boolean written in quotes ("32") is a string in YAML: refused, not converted.
  template <typename T>
  T scalar(const std::string& key, const YAML::Node& v, const std::string& expected) {
    T out{};
    if (!v.IsScalar() || !YAML::convert<T>::decode(v, out)) bad(key, v, "expected " + expected);
    if (v.Tag() == "!") bad(key, v, "expected " + expected + ", not a quoted string");
    return out;
  }

  // Where the key's value came from, and its text, for messages about it (Config::describe).
  void record(const std::string& key, const std::string& text, const YAML::Node& node) {
    const std::string full = sub(key);
    ctx_.cfg.value_text[full] = text;
    ctx_.cfg.origin[full] = node.IsDefined() && !node.IsNull() ? ctx_.where(full, node) : "default";
  }

  // Keys present in the file that the chosen type does not use.
  void finish() {
    if (!node_.IsDefined() || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      if (used_.count(key)) continue;
      const std::string full = sub(key);
      std::string type = "this configuration";
      if (node_["type"].IsDefined() && node_["type"].IsScalar()) {
        type = sub("type") + " '" + node_["type"].Scalar() + "'";
      }
      ctx_.fail("key '" + full + "' at " + ctx_.where(full, kv.first) + " does not apply to " +
                type +
                " (used here: " + join(std::vector<std::string>(used_.begin(), used_.end())) + ")");
    }
  }

  Context& ctx() const { return ctx_; }
  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  std::string label() const { return path_.empty() ? "the config" : path_; }

  Context& ctx_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> keys_;
  std::set<std::string> used_;
};

// The names a section declares (for unknown-key messages), and the required keys of one type.
struct KeyNames {
  std::vector<std::string> names;
  void add(const std::string& n) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  template <typename T>
  void field(const schema::Key<T>& k) {
    add(k.name);
  }
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>& b) {
    add(a.name), add(b.name);
  }
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char* name, S&, const char*, const std::vector<std::string>& = {}) {
    add(name);
  }
};
struct RequiredKeys {
  std::string type;
  std::vector<std::string> names;
  template <typename T>
  void field(const schema::Key<T>& k) {
    if (k.is_required && !k.is_selector && k.applies(type)) names.push_back(k.name);
  }
  template <typename A, typename B>
  void either(const schema::Key<A>&, const schema::Key<B>&) {}
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char*, S&, const char*, const std::vector<std::string>& = {}) {}
};

template <typename S>
void parse_section(Context& ctx, const YAML::Node& node, const std::string& path, S& out,
                   bool list_item = false);

// Reads one section's keys into their members, as config_schema.h declares them.
class Parser {
 public:
  Parser(Section& s, bool list_item) : s_(s), list_item_(list_item) {}

  template <typename T>
  void field(const schema::Key<T>& k) {
    if (k.is_selector) {
      if (list_item_ && !s_.has(k.name)) item_fail("missing key '" + std::string(k.name) + "'");
      read(k);
      type_ = text_of(*k.member);
      return;
    }
    if (!k.applies(type_)) return;
    if (k.is_required && !s_.has(k.name)) {
      if (list_item_) item_fail(type_ + " needs key '" + k.name + "'");
      const std::string type_key = s_.sub("type");
      s_.ctx().fail(s_.sub(k.name) + ": required for " + type_key + " '" + type_ + "' (" +
                    s_.ctx().where(type_key, s_.at("type")) + ")");
    }
    read(k);
  }

  // The second is chosen when given; the one not chosen is reset to its empty value.
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>& b) {
    if (s_.has(a.name) && s_.has(b.name)) {
      s_.bad(b.name, s_.at(b.name),
             "give either " + s_.sub(a.name) + " or " + s_.sub(b.name) + ", not both");
    }
    if (s_.has(b.name)) {
      read(b);
      s_.take(a.name);
      *a.member = A{};
    } else {
      read(a);
      s_.take(b.name);
      *b.member = B{};
      // A selector chosen this way (model.preset) selects the keys that follow, as `type` does.
      if constexpr (std::is_same_v<A, std::string>) {
        if (a.is_selector) type_ = *a.member;
      }
    }
  }

  void rule(const schema::Rule& r) {
    const bool applies =
        r.only.empty() || std::find(r.only.begin(), r.only.end(), type_) != r.only.end();
    if (applies && !r.ok()) s_.bad(r.key, s_.at(r.key), r.problem);
  }

  // A section for other values of the selector is left untaken: finish() refuses it if given.
  template <typename S>
  void section(const char* name, S& out, const char*, const std::vector<std::string>& only = {}) {
    if (!only.empty() && std::find(only.begin(), only.end(), type_) == only.end()) return;
    parse_section(s_.ctx(), s_.take(name).value_or(YAML::Node()), s_.sub(name), out);
  }

 private:
  [[noreturn]] void item_fail(const std::string& problem) const {
    s_.ctx().fail(s_.path() + " (" + s_.ctx().where(s_.path(), s_.node()) + "): " + problem);
  }

  template <typename T>
  void read(const schema::Key<T>& k) {
    auto v = s_.take(k.name);
    if (v) {
      *k.member = value(k, *v);
      s_.record(k.name, given_text(*k.member, *v), *v);
    } else {
      for (const auto& [type, def] : k.per_type) {
        if (type == type_) *k.member = def;
      }
      if (k.computed_default) *k.member = k.computed_default();
      s_.record(k.name, default_text(*k.member), YAML::Node());
    }
    if (k.check) {
      if (const std::string problem = k.check(*k.member); !problem.empty())
        s_.bad(k.name, s_.at(k.name), problem);
    }
  }

  // ---- one value of each kind
  int64_t value(const schema::Key<int64_t>& k, const YAML::Node& v) {
    const int64_t x = s_.scalar<int64_t>(k.name, v, "an integer");
    if (x < k.min_int || x > k.max_int) {
      s_.bad(k.name, v,
             k.max_int == std::numeric_limits<int64_t>::max()
                 ? "must be >= " + std::to_string(k.min_int)
                 : "must be in [" + std::to_string(k.min_int) + ", " + std::to_string(k.max_int) +
                       "]");
    }
    return x;
  }
  uint64_t value(const schema::Key<uint64_t>& k, const YAML::Node& v) {
    const int64_t x = s_.scalar<int64_t>(k.name, v, "an integer");
    if (x < 0) s_.bad(k.name, v, "must be >= 0");
    return static_cast<uint64_t>(x);
  }
  double value(const schema::Key<double>& k, const YAML::Node& v) {
    const double x = s_.scalar<double>(k.name, v, "a number");
    if (!std::isfinite(x) || !k.range.contains(x)) s_.bad(k.name, v, range_text(k.range));
    return x;
  }
  bool value(const schema::Key<bool>& k, const YAML::Node& v) {
    return s_.scalar<bool>(k.name, v, "true or false");
  }
  std::optional<bool> value(const schema::Key<std::optional<bool>>& k, const YAML::Node& v) {
    if (v.IsScalar() && v.Scalar() == "auto") return std::nullopt;
    return s_.scalar<bool>(k.name, v, "true, false or auto");
  }
  std::string value(const schema::Key<std::string>& k, const YAML::Node& v) {
    return k.choices.empty() ? string(k.name, v) : choice(k.name, v, k.choices);
  }
  DType value(const schema::Key<DType>& k, const YAML::Node& v) {
    return parse_dtype(choice(k.name, v, k.choices));
  }
  char value(const schema::Key<char>& k, const YAML::Node& v) {
    const std::string s = string(k.name, v);
    if (s.size() != 1) s_.bad(k.name, v, "must be one character");
    return s[0];
  }
  // A list of scalars (a single scalar counts as a list of one).
  std::vector<std::string> value(const schema::Key<std::vector<std::string>>& k,
                                 const YAML::Node& v) {
    std::vector<std::string> out;
    for (const auto& e : items(v)) {
      if (!e.IsScalar()) s_.bad(k.name, v, "expected a list of names or column indices");
      out.push_back(e.Scalar());
    }
    return out;
  }
  std::vector<int64_t> value(const schema::Key<std::vector<int64_t>>& k, const YAML::Node& v) {
    if (!v.IsScalar() && !v.IsSequence())
      s_.bad(k.name, v, "expected a positive integer or a list of them");
    std::vector<int64_t> out;
    for (const auto& e : items(v)) {
      out.push_back(s_.scalar<int64_t>(
          k.name, e,
          v.IsScalar() ? "a positive integer or a list of them" : "a list of positive integers"));
    }
    if (out.empty()) s_.bad(k.name, v, "expected at least one size");
    for (auto d : out) {
      if (d < 1) s_.bad(k.name, v, "sizes must be >= 1");
    }
    return out;
  }
  // true, false, or a list of block indices (one index counts as a list of one).
  BlockSelection value(const schema::Key<BlockSelection>& k, const YAML::Node& v) {
    BlockSelection out;
    if (v.IsScalar() && (v.Scalar() == "true" || v.Scalar() == "false")) {
      out.all = v.Scalar() == "true";
      return out;
    }
    if (!v.IsScalar() && !v.IsSequence())
      s_.bad(k.name, v, "expected true, false or a list of block indices");
    for (const auto& e : items(v)) {
      const int64_t i = s_.scalar<int64_t>(k.name, e, "true, false or a list of block indices");
      if (i < 0) s_.bad(k.name, v, "block indices must be >= 0");
      if (std::find(out.blocks.begin(), out.blocks.end(), i) != out.blocks.end())
        s_.bad(k.name, v, "lists block " + std::to_string(i) + " twice");
      out.blocks.push_back(i);
    }
    return out;
  }
  // A number or a non-empty list of them.
  std::vector<double> value(const schema::Key<std::vector<double>>& k, const YAML::Node& v) {
    const std::vector<YAML::Node> list = items(v);
    if (list.empty() || v.IsMap())
      s_.bad(k.name, v, "expected a number or a non-empty list of them");
    std::vector<double> out;
    for (const auto& e : list) {
      const double x = s_.scalar<double>(k.name, e, "a number or a list of numbers");
      if (!std::isfinite(x) || !k.range.contains(x))
        s_.bad(k.name, e, "values " + range_text(k.range));
      out.push_back(x);
    }
    return out;
  }
  // [first, second]; the message names them after the key ("betas": [beta1, beta2]).
  std::pair<double, double> value(const schema::Key<std::pair<double, double>>& k,
                                  const YAML::Node& v) {
    const auto x = numbers<2>(k, v);
    return {x[0], x[1]};
  }
  template <size_t N>
  std::array<double, N> value(const schema::Key<std::array<double, N>>& k, const YAML::Node& v) {
    return numbers<N>(k, v);
  }
  // Exactly N numbers, named after the key ("ns_coefficients": [ns_coefficient1, ...]).
  template <size_t N, typename T>
  std::array<double, N> numbers(const schema::Key<T>& k, const YAML::Node& v) {
    std::string one = k.name;
    if (!one.empty() && one.back() == 's') one.pop_back();
    std::string shape = "[";
    for (size_t i = 0; i < N; ++i) shape += (i ? ", " : "") + one + std::to_string(i + 1);
    shape += "]";
    if (!v.IsSequence() || v.size() != N) s_.bad(k.name, v, "expected " + shape);
    std::array<double, N> x{};
    for (size_t i = 0; i < N; ++i) {
      x[i] = s_.scalar<double>(k.name, v[i], shape + " numbers");
      if (!std::isfinite(x[i]) || !k.range.contains(x[i]))
        s_.bad(k.name, v[i], "each " + one + " " + range_text(k.range));
    }
    return x;
  }
  // One of the enum's names.
  template <schema::NamedEnum E>
  E value(const schema::Key<E>& k, const YAML::Node& v) {
    const std::vector<std::string>& names = option_names(E{});
    const std::string s = choice(k.name, v, names);
    const auto i = std::find(names.begin(), names.end(), s) - names.begin();
    return static_cast<E>(static_cast<std::underlying_type_t<E>>(i));
  }
  std::vector<LayerSpec> value(const schema::Key<std::vector<LayerSpec>>& k, const YAML::Node& v) {
    if (!v.IsSequence() || v.size() == 0) s_.bad(k.name, v, "expected a non-empty list of layers");
    std::vector<LayerSpec> out;
    std::set<std::string> names;
    for (size_t i = 0; i < v.size(); ++i) {
      LayerSpec l = layer(v[i], s_.sub(k.name) + "." + std::to_string(i));
      const std::string child = l.name.empty() ? std::to_string(i) : l.name;
      if (!names.insert(child).second) {
        s_.ctx().fail(l.path + ".name = " + child + " (" + s_.ctx().where(l.path, v[i]) +
                      "): another layer already has this name");
      }
      out.push_back(std::move(l));
    }
    return out;
  }

  LayerSpec layer(const YAML::Node& node, const std::string& path) {
    Context& ctx = s_.ctx();
    LayerSpec l;
    l.path = path;
    if (!node.IsDefined() || node.IsNull())
      ctx.fail(path + " (" + ctx.where(path, node) + "): expected a layer");
    if (!node.IsScalar()) {
      parse_section(ctx, node, path, l, /*list_item=*/true);
      return l;
    }
    // "- relu": the type alone, for layers without required keys.
    const auto& types = kLayerTypes;
    l.type = node.Scalar();
    if (std::find(types.begin(), types.end(), l.type) == types.end()) {
      const std::string near = nearest_key(l.type, types);
      ctx.fail(
          path + " = " + l.type + " (" + ctx.where(path, node) + "): unknown layer type" +
          (near.empty() ? "; expected one of " + join(types) : " — did you mean '" + near + "'?"));
    }
    ctx.cfg.value_text[path + ".type"] = l.type;
    ctx.cfg.origin[path + ".type"] = ctx.where(path, node);
    RequiredKeys required{l.type, {}};
    schema::describe(required, l);
    if (!required.names.empty()) {
      std::string example = "{type: " + l.type;
      for (const auto& r : required.names) example += ", " + r + ": ...";
      ctx.fail(path + " = " + l.type + " (" + ctx.where(path, node) +
               "): this layer needs parameters; write it as a map, e.g. " + example + "}");
    }
    return l;
  }

  std::string string(const std::string& key, const YAML::Node& v) {
    if (!v.IsScalar()) s_.bad(key, v, "expected a string");
    return v.Scalar();
  }
  std::string choice(const std::string& key, const YAML::Node& v,
                     const std::vector<std::string>& choices) {
    if (!v.IsScalar()) s_.bad(key, v, "expected one of " + join(choices));
    const std::string s = v.Scalar();
    if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
      const std::string near = nearest_key(s, choices);
      s_.bad(key, v,
             "expected one of " + join(choices) +
                 (near.empty() ? "" : " — did you mean '" + near + "'?"));
    }
    return s;
  }
  static std::vector<YAML::Node> items(const YAML::Node& v) {
    std::vector<YAML::Node> out;
    if (v.IsSequence()) {
      for (const auto& e : v) out.push_back(e);
    } else {
      out.push_back(v);
    }
    return out;
  }

  // ---- the texts of values in messages (Config::value_text)
  static std::string list_text(const std::vector<std::string>& v) {
    std::string out = "[";
    out += join(v);
    out += ']';
    return out;
  }
  static std::string text_of(const std::string& s) { return s; }
  static std::string text_of(int64_t x) { return std::to_string(x); }
  static std::string text_of(uint64_t x) { return std::to_string(x); }
  static std::string text_of(double x) { return yaml_double(x); }
  static std::string text_of(bool b) { return b ? "true" : "false"; }
  static std::string text_of(const std::optional<bool>& b) { return b ? text_of(*b) : "auto"; }
  static std::string text_of(DType t) { return std::string(dtype_name(t)); }
  static std::string text_of(char c) { return std::string(1, c); }
  static std::string text_of(const std::vector<std::string>& v) { return list_text(v); }
  template <typename N>
  static std::string text_of(const std::vector<N>& v) {
    std::vector<std::string> s;
    for (const auto& x : v) s.push_back(text_of(x));
    return list_text(s);
  }
  static std::string text_of(const std::pair<double, double>& p) {
    return list_text({yaml_double(p.first), yaml_double(p.second)});
  }
  template <size_t N>
  static std::string text_of(const std::array<double, N>& a) {
    std::vector<std::string> s;
    for (double x : a) s.push_back(yaml_double(x));
    return list_text(s);
  }
  template <schema::NamedEnum E>
  static std::string text_of(E e) {
    return schema::enum_name(e);
  }
  static std::string text_of(const BlockSelection& b) {
    return b.all ? "true" : b.blocks.empty() ? "false" : text_of(b.blocks);
  }
  static std::string text_of(const std::vector<LayerSpec>& v) {
    return std::to_string(v.size()) + " layers";
  }
  template <typename T>
  static std::string given_text(const T& value, const YAML::Node& v) {
    if constexpr (std::is_same_v<T, std::vector<std::string>> ||
                  std::is_same_v<T, std::vector<int64_t>> ||
                  std::is_same_v<T, std::vector<double>> ||
                  std::is_same_v<T, std::pair<double, double>> || schema::kIsNumberArray<T> ||
                  std::is_same_v<T, std::vector<LayerSpec>> || std::is_same_v<T, BlockSelection>) {
      return text_of(value);
    } else {
      return v.Scalar();  // as written
    }
  }
  template <typename T>
  static std::string default_text(const T& value) {
    if constexpr (std::is_same_v<T, std::string>) {
      return value.empty() ? "\"\"" : value;
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      return value.empty() ? "null" : text_of(value);
    } else {
      return text_of(value);
    }
  }

  Section& s_;
  bool list_item_;
  std::string type_;  // the value of the section's selector, once read
};

template <typename S>
void parse_section(Context& ctx, const YAML::Node& node, const std::string& path, S& out,
                   bool list_item) {
  KeyNames names;
  schema::describe(names, out);
  Section s(ctx, node, path, names.names);
  Parser p(s, list_item);
  schema::describe(p, out);
  s.finish();
}

}  // namespace

std::string schema::check_device(const std::string& device) {
  if (device == "auto") return "";
  try {
    (void)Device(device);
  } catch (const Error&) {
    return "expected auto, cpu, cuda or cuda:N";
  }
  return "";
}

namespace {

// --set key.path=value: the value is YAML, put into the tree before validation.
void apply_override(Context& ctx, YAML::Node& root, const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    ctx.fail("--set '" + text + "': expected key.path=value (e.g. --set optimizer.lr=0.1)");
  }
  const std::string path = text.substr(0, eq);
  std::vector<std::string> parts;
  std::stringstream ss(path);
  for (std::string p; std::getline(ss, p, '.');) {
    if (p.empty()) ctx.fail("--set '" + text + "': empty component in key path '" + path + "'");
    parts.push_back(p);
  }
  const std::string value_text = text.substr(eq + 1);
  // An empty value is most often an unset shell variable (--set optimizer.lr=$LR): refused
  // rather than read as "no value", which would silently mean the default.
  if (value_text.find_first_not_of(" \t") == std::string::npos) {
    ctx.fail("--set " + path + ": the value is empty (an unset shell variable?); give a value");
  }
  YAML::Node value;
  try {
    value = YAML::Load(value_text);
  } catch (const YAML::Exception& e) {
    ctx.fail("--set " + path + ": the value '" + value_text + "' is not valid YAML (" + e.msg +
             ")");
  }
  check_yaml_tree(value, "--set " + path, path);
  check_quotes(ctx, value, value_text, "--set " + path);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node cur = root;
  for (size_t i = 0; i < parts.size(); ++i) {
    const bool last = i + 1 == parts.size();
    const std::string so_far =
        join(std::vector<std::string>(parts.begin(), parts.begin() + i + 1), ".");
    if (cur.IsSequence()) {
      size_t idx = 0;
      auto r = std::from_chars(parts[i].data(), parts[i].data() + parts[i].size(), idx);
      if (r.ec != std::errc() || r.ptr != parts[i].data() + parts[i].size() || idx >= cur.size()) {
        ctx.fail("--set " + path + ": '" + so_far + "' is not an index of the list (" +
                 std::to_string(cur.size()) + " entries)");
      }
      if (last) {
        cur[idx] = value;
      } else {
        YAML::Node next = cur[idx];
        cur.reset(next);
      }
      continue;
    }
    if (cur.IsNull()) cur = YAML::Node(YAML::NodeType::Map);
    if (!cur.IsMap())
      ctx.fail("--set " + path + ": '" + so_far + "' is inside a value that is not a map");
    if (last) {
      cur[parts[i]] = value;
    } else {
      if (!cur[parts[i]].IsDefined() || cur[parts[i]].IsNull()) {
        cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
        ctx.override_paths.push_back(so_far);  // created by this override
      }
      YAML::Node next = cur[parts[i]];
      cur.reset(next);
    }
  }
  // Overriding the run length replaces the file's choice of steps or epochs.
  if (path == "steps" || path == "epochs") {
    const char* other = path == "steps" ? "epochs" : "steps";
    if (root[other].IsDefined()) root.remove(other);
  }
  ctx.override_paths.push_back(path);
}

}  // namespace

Config parse_config(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides, const std::string& default_name) {
  Config cfg;
  cfg.source = source;
  Context ctx{cfg, {}};
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError("config error: " + source + " is not valid YAML: " + e.msg + " at line " +
                      std::to_string(e.mark.line + 1) + ", column " +
                      std::to_string(e.mark.column + 1));
  }
  check_yaml_tree(root, source);
  check_quotes(ctx, root, yaml_text, source);
  for (const auto& o : overrides) apply_override(ctx, root, o);

  cfg.name = default_name;
  parse_section(ctx, root, "", cfg);
  return cfg;
}

Config parse_config_file(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string what = "config error: cannot read config file '" + path + "': ";
  if (const std::string problem = regular_file_problem(path); !problem.empty()) {
    throw ConfigError(what + problem);
  }
  std::string text;
  try {
    text = read_file_bytes(path);
  } catch (const Error& e) {  // e.g. permissions; the message names the OS error
    throw ConfigError(what + e.what());
  }
  Config config = parse_config(text, path, overrides, std::filesystem::path(path).stem().string());
  locate_files_beside_config(config);
  return config;
}

}  // namespace mantissa::runner
