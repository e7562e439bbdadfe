// YAML -> Config with validation (see config.h). The YAML tree is read section by section; a
// Section knows every key its schema has, so a typo is reported with the nearest valid key before
// any value is looked at, and a key that exists but does not apply to the chosen type (an Adam
// option under `type: sgd`) is reported as such at the end of the section.
#include "runner/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "engine/device.h"
#include "runner/atomic_file.h"
#include "runner/text.h"

namespace mantissa::runner {

std::string Config::describe(const std::string& path) const {
  std::string out = path;
  if (auto v = value_text.find(path); v != value_text.end()) out += " = " + v->second;
  if (auto o = origin.find(path); o != origin.end() && o->second != "default") {
    out += " (" + o->second + ")";
  }
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

std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

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
void check_quotes(const Context& ctx, const YAML::Node& node, const std::string& text,
                  const std::string& source) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      check_quotes(ctx, kv.first, text, source);
      check_quotes(ctx, kv.second, text, source);
    }
    return;
  }
  if (node.IsSequence()) {
    for (const auto& e : node) check_quotes(ctx, e, text, source);
    return;
  }
  if (!node.IsScalar() || node.Mark().is_null()) return;
  const auto pos = static_cast<size_t>(node.Mark().pos);
  if (pos >= text.size() || (text[pos] != '"' && text[pos] != '\'')) return;
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

std::string node_text(const YAML::Node& n) {
  if (!n.IsDefined() || n.IsNull()) return "null";
  if (n.IsScalar()) return n.Scalar().empty() ? "\"\"" : n.Scalar();
  if (n.IsSequence()) return "a list";
  return "a map";
}

struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  std::string text() const {
    const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
    if (has_lo && has_hi) {
      return std::string("must be in ") + (lo_open ? "(" : "[") + yaml_double(lo) + ", " +
             yaml_double(hi) + (hi_open ? ")" : "]");
    }
    if (has_lo) return std::string("must be ") + (lo_open ? "> " : ">= ") + yaml_double(lo);
    if (has_hi) return std::string("must be ") + (hi_open ? "< " : "<= ") + yaml_double(hi);
    return "must be finite";
  }
};
Range positive() { return {0, std::numeric_limits<double>::infinity(), true, false}; }
Range non_negative() { return {0, std::numeric_limits<double>::infinity(), false, false}; }

// One YAML map of the schema.
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

  [[noreturn]] void bad(const std::string& key, const YAML::Node& v, const std::string& problem) {
    const std::string full = sub(key);
    ctx_.fail(full + " = " + node_text(v) + " (" + ctx_.where(full, v) + "): " + problem);
  }

  // A number or boolean written in quotes ("32") is a string in YAML: refused, not converted.
  template <typename T>
  T scalar(const std::string& key, const YAML::Node& v, const char* expected) {
    T out{};
    if (!v.IsScalar() || !YAML::convert<T>::decode(v, out))
      bad(key, v, std::string("expected ") + expected);
    if (v.Tag() == "!") bad(key, v, std::string("expected ") + expected + ", not a quoted string");
    return out;
  }

  double get_double(const std::string& key, double def, Range range = {}) {
    auto v = take(key);
    if (!v) return record(key, def, yaml_double(def));
    const double x = scalar<double>(key, *v, "a number");
    if (!std::isfinite(x) || !range.contains(x)) bad(key, *v, range.text());
    return record(key, x, v->Scalar(), *v);
  }
  int64_t get_int(const std::string& key, int64_t def, int64_t lo = 0,
                  int64_t hi = std::numeric_limits<int64_t>::max()) {
    auto v = take(key);
    if (!v) return record(key, def, std::to_string(def));
    const int64_t x = scalar<int64_t>(key, *v, "an integer");
    if (x < lo || x > hi) {
      bad(key, *v,
          hi == std::numeric_limits<int64_t>::max()
              ? "must be >= " + std::to_string(lo)
              : "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    return record(key, x, v->Scalar(), *v);
  }
  bool get_bool(const std::string& key, bool def) {
    auto v = take(key);
    if (!v) return record(key, def, def ? "true" : "false");
    return record(key, scalar<bool>(key, *v, "true or false"), v->Scalar(), *v);
  }
  // true / false / auto (nullopt).
  std::optional<bool> get_tristate(const std::string& key, std::optional<bool> def) {
    auto v = take(key);
    if (!v) {
      record(key, 0, def ? (*def ? "true" : "false") : "auto");
      return def;
    }
    if (v->IsScalar() && v->Scalar() == "auto") {
      record(key, 0, "auto", *v);
      return std::nullopt;
    }
    return record(key, scalar<bool>(key, *v, "true, false or auto"), v->Scalar(), *v);
  }
  std::string get_string(const std::string& key, const std::string& def) {
    auto v = take(key);
    if (!v) return record(key, def, def.empty() ? "\"\"" : def);
    if (!v->IsScalar()) bad(key, *v, "expected a string");
    return record(key, v->Scalar(), v->Scalar(), *v);
  }
  std::string get_choice(const std::string& key, const std::string& def,
                         const std::vector<std::string>& choices) {
    auto v = take(key);
    if (!v) return record(key, def, def);
    if (!v->IsScalar()) bad(key, *v, "expected one of " + join(choices));
    const std::string s = v->Scalar();
    if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
      const std::string near = nearest_key(s, choices);
      bad(key, *v,
          "expected one of " + join(choices) +
              (near.empty() ? "" : " — did you mean '" + near + "'?"));
    }
    return record(key, s, s, *v);
  }
  // A list of scalars (a single scalar counts as a list of one).
  std::vector<std::string> get_string_list(const std::string& key) {
    auto v = take(key);
    std::vector<std::string> out;
    if (!v) return record(key, out, "[]");
    if (v->IsScalar()) {
      out.push_back(v->Scalar());
    } else if (v->IsSequence()) {
      for (const auto& e : *v) {
        if (!e.IsScalar()) bad(key, *v, "expected a list of names or column indices");
        out.push_back(e.Scalar());
      }
    } else {
      bad(key, *v, "expected a list of names or column indices");
    }
    return record(key, out, "[" + join(out) + "]", *v);
  }
  std::vector<int64_t> get_int_list(const std::string& key, const std::vector<int64_t>& def) {
    auto v = take(key);
    auto text = [](const std::vector<int64_t>& x) {
      std::vector<std::string> s;
      for (auto d : x) s.push_back(std::to_string(d));
      return "[" + join(s) + "]";
    };
    if (!v) return record(key, def, text(def));
    std::vector<int64_t> out;
    if (v->IsScalar()) {
      out.push_back(scalar<int64_t>(key, *v, "a positive integer or a list of them"));
    } else if (v->IsSequence()) {
      for (const auto& e : *v)
        out.push_back(scalar<int64_t>(key, e, "a list of positive integers"));
    } else {
      bad(key, *v, "expected a positive integer or a list of them");
    }
    if (out.empty()) bad(key, *v, "expected at least one size");
    for (auto d : out) {
      if (d < 1) bad(key, *v, "sizes must be >= 1");
    }
    return record(key, out, text(out), *v);
  }

  // Keys present in the file that the chosen type does not use.
  void finish(const std::string& type_key = "type") {
    if (!node_.IsDefined() || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      if (used_.count(key)) continue;
      const std::string full = sub(key);
      std::string type = "this configuration";
      if (node_[type_key].IsDefined() && node_[type_key].IsScalar()) {
        type = sub(type_key) + " '" + node_[type_key].Scalar() + "'";
      }
      ctx_.fail("key '" + full + "' at " + ctx_.where(full, kv.first) + " does not apply to " +
                type +
                " (used here: " + join(std::vector<std::string>(used_.begin(), used_.end())) + ")");
    }
  }

  const YAML::Node& node() const { return node_; }
  std::string sub(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  std::string label() const { return path_.empty() ? "the config" : path_; }
  template <typename T>
  T record(const std::string& key, T value, const std::string& text,
           const YAML::Node& node = YAML::Node()) {
    const std::string full = sub(key);
    ctx_.cfg.value_text[full] = text;
    ctx_.cfg.origin[full] = node.IsDefined() && !node.IsNull() ? ctx_.where(full, node) : "default";
    return value;
  }

  Context& ctx_;
  YAML::Node node_;
  std::string path_;
  std::vector<std::string> keys_;
  std::set<std::string> used_;
};

// ---- sections
// -------------------------------------------------------------------------------------

const std::vector<std::string> kLayerTypes = {"linear",  "relu",      "gelu",    "silu",
                                              "sigmoid", "tanh",      "dropout", "layernorm",
                                              "conv2d",  "maxpool2d", "flatten"};

LayerSpec parse_layer(Context& ctx, const YAML::Node& node, const std::string& path) {
  LayerSpec l;
  l.path = path;
  if (node.IsScalar()) {  // "- relu"
    l.type = node.Scalar();
    if (std::find(kLayerTypes.begin(), kLayerTypes.end(), l.type) == kLayerTypes.end()) {
      const std::string near = nearest_key(l.type, kLayerTypes);
      ctx.fail(path + " = " + l.type + " (" + ctx.where(path, node) + "): unknown layer type" +
               (near.empty() ? "; expected one of " + join(kLayerTypes)
                             : " — did you mean '" + near + "'?"));
    }
    ctx.cfg.value_text[path + ".type"] = l.type;
    ctx.cfg.origin[path + ".type"] = ctx.where(path, node);
    if (l.type == "linear" || l.type == "conv2d" || l.type == "layernorm" ||
        l.type == "maxpool2d") {
      ctx.fail(path + " = " + l.type + " (" + ctx.where(path, node) +
               "): this layer needs parameters; write it as a map, e.g. {type: " + l.type +
               (l.type == "linear"      ? ", in: 10, out: 10}"
                : l.type == "layernorm" ? ", shape: 10}"
                                        : ", ...}"));
    }
    return l;
  }
  Section s(ctx, node, path,
            {"type", "name", "in", "out", "bias", "approximate", "p", "shape", "eps", "affine",
             "kernel", "stride", "padding", "start_dim", "end_dim"});
  if (!node.IsMap()) ctx.fail(path + " (" + ctx.where(path, node) + "): expected a layer");
  if (!s.has("type")) ctx.fail(path + " (" + ctx.where(path, node) + "): missing key 'type'");
  l.type = s.get_choice("type", "", kLayerTypes);
  l.name = s.get_string("name", "");
  if (l.name.find('.') != std::string::npos) {
    s.bad("name", node["name"], "a layer name cannot contain '.'");
  }
  auto need = [&](const char* key) {
    if (!s.has(key)) {
      ctx.fail(path + " (" + ctx.where(path, node) + "): " + l.type + " needs key '" + key + "'");
    }
  };
  if (l.type == "linear") {
    need("in"), need("out");
    l.in = s.get_int("in", 0, 1);
    l.out = s.get_int("out", 0, 1);
    l.bias = s.get_bool("bias", true);
  } else if (l.type == "gelu") {
    l.approximate = s.get_choice("approximate", "none", {"none", "tanh"});
  } else if (l.type == "dropout") {
    l.p = s.get_double("p", 0.5, Range{0, 1, false, true});
  } else if (l.type == "layernorm") {
    need("shape");
    l.shape = s.get_int_list("shape", {});
    l.eps = s.get_double("eps", 1e-5, positive());
    l.affine = s.get_bool("affine", true);
  } else if (l.type == "conv2d") {
    need("in"), need("out"), need("kernel");
    l.in = s.get_int("in", 0, 1);
    l.out = s.get_int("out", 0, 1);
    l.kernel = s.get_int("kernel", 0, 1);
    l.stride = s.get_int("stride", 1, 1);
    l.padding = s.get_int("padding", 0, 0);
    l.bias = s.get_bool("bias", true);
  } else if (l.type == "maxpool2d") {
    need("kernel");
    l.kernel = s.get_int("kernel", 0, 1);
    l.stride = s.get_int("stride", l.kernel, 1);
    l.padding = s.get_int("padding", 0, 0);
    if (2 * l.padding > l.kernel)
      s.bad("padding", node["padding"], "must be at most half of kernel");
  } else if (l.type == "flatten") {
    l.start_dim = s.get_int("start_dim", 1, -8, 8);
    l.end_dim = s.get_int("end_dim", -1, -8, 8);
  }
  s.finish();
  return l;
}

void parse_model(Context& ctx, const YAML::Node& node, ModelConfig& m) {
  Section s(ctx, node, "model", {"preset", "layers", "init_from"});
  if (s.has("preset") && s.has("layers")) {
    s.bad("layers", node["layers"], "give either model.preset or model.layers, not both");
  }
  if (auto layers = s.take("layers")) {
    if (!layers->IsSequence() || layers->size() == 0) {
      s.bad("layers", *layers, "expected a non-empty list of layers");
    }
    std::set<std::string> names;
    for (size_t i = 0; i < layers->size(); ++i) {
      LayerSpec l = parse_layer(ctx, (*layers)[i], "model.layers." + std::to_string(i));
      const std::string child = l.name.empty() ? std::to_string(i) : l.name;
      if (!names.insert(child).second) {
        ctx.fail(l.path + ".name = " + child + " (" + ctx.where(l.path, (*layers)[i]) +
                 "): another layer already has this name");
      }
      m.layers.push_back(std::move(l));
    }
    ctx.cfg.origin["model.layers"] = ctx.where("model.layers", *layers);
    ctx.cfg.value_text["model.layers"] = std::to_string(m.layers.size()) + " layers";
  } else {
    m.preset = s.get_choice("preset", "toy", {"toy"});
  }
  m.init_from = s.get_string("init_from", "");
  s.finish();
}

void parse_data(Context& ctx, const YAML::Node& node, DataConfig& d) {
  Section s(ctx, node, "data",
            {"type",     "samples",        "in_features",   "hidden",       "out_features",
             "noise",    "x_min",          "x_max",         "turns",        "path",
             "header",   "target_columns", "input_columns", "target_dtype", "delimiter",
             "inputs",   "targets",        "images",        "labels",       "flatten",
             "limit",    "batch_size",     "shuffle",       "seed",         "val_split",
             "drop_last"});
  d.type = s.get_choice("type", "teacher",
                        {"teacher", "sine", "spirals", "csv", "safetensors", "mnist"});
  auto required_path = [&](const char* key) {
    if (!s.has(key)) {
      ctx.fail("data." + std::string(key) + ": required for data.type '" + d.type + "' (" +
               ctx.where("data.type", node["type"]) + ")");
    }
    return s.get_string(key, "");
  };
  if (d.type == "teacher" || d.type == "sine" || d.type == "spirals") {
    d.samples = s.get_int("samples", 1024, 1);
    d.noise = s.get_double("noise", d.type == "spirals" ? 0.1 : 0.0, non_negative());
  }
  if (d.type == "teacher") {
    d.in_features = s.get_int("in_features", 10, 1);
    d.hidden = s.get_int("hidden", 10, 1);
    d.out_features = s.get_int("out_features", 5, 1);
  } else if (d.type == "sine") {
    d.x_min = s.get_double("x_min", d.x_min);
    d.x_max = s.get_double("x_max", d.x_max);
    if (!(d.x_max > d.x_min)) s.bad("x_max", node["x_max"], "must be greater than data.x_min");
  } else if (d.type == "spirals") {
    d.turns = s.get_double("turns", 1.5, positive());
  } else if (d.type == "csv") {
    d.path = required_path("path");
    d.header = s.get_tristate("header", std::nullopt);
    d.target_columns = s.get_string_list("target_columns");
    d.input_columns = s.get_string_list("input_columns");
    d.target_dtype = s.get_choice("target_dtype", "float32", {"float32", "int64"});
    d.delimiter = s.get_string("delimiter", ",");
    if (d.delimiter.size() != 1) s.bad("delimiter", node["delimiter"], "must be one character");
  } else if (d.type == "safetensors") {
    d.path = required_path("path");
    d.inputs = s.get_string("inputs", "inputs");
    d.targets = s.get_string("targets", "targets");
  } else if (d.type == "mnist") {
    d.images = required_path("images");
    d.labels = required_path("labels");
    d.flatten = s.get_bool("flatten", false);
    d.limit = s.get_int("limit", 0, 0);
  }
  d.batch_size = s.get_int("batch_size", 32, 1);
  d.shuffle = s.get_bool("shuffle", true);
  d.seed = static_cast<uint64_t>(s.get_int("seed", 0, 0));
  d.val_split = s.get_double("val_split", 0.0, Range{0, 1, false, true});
  d.drop_last = s.get_bool("drop_last", false);
  s.finish();
}

void parse_loss(Context& ctx, const YAML::Node& node, LossConfig& l) {
  Section s(ctx, node, "loss",
            {"type", "reduction", "label_smoothing", "ignore_index", "pos_weight"});
  l.type = s.get_choice("type", "mse", {"mse", "l1", "cross_entropy", "bce_with_logits"});
  l.reduction = s.get_choice("reduction", "mean", {"mean", "sum"});
  if (l.type == "cross_entropy") {
    l.label_smoothing = s.get_double("label_smoothing", 0.0, Range{0, 1, false, false});
    l.ignore_index = s.get_int("ignore_index", -100, std::numeric_limits<int64_t>::min());
  }
  if (l.type == "bce_with_logits") {
    // A number or a list (one weight per output); its length is checked against the model in
    // build_from_config, which knows the output shape.
    std::vector<std::string> text;
    if (auto v = s.take("pos_weight")) {
      std::vector<YAML::Node> items;
      if (v->IsSequence()) {
        for (const auto& e : *v) items.push_back(e);
      } else {
        items.push_back(*v);
      }
      if (items.empty()) s.bad("pos_weight", *v, "expected a number or a non-empty list of them");
      for (const auto& e : items) {
        const double w = s.scalar<double>("pos_weight", e, "a number or a list of numbers");
        if (!(std::isfinite(w) && w >= 0)) s.bad("pos_weight", e, "weights must be >= 0");
        l.pos_weight.push_back(w);
        text.push_back(yaml_double(w));
      }
      ctx.cfg.origin["loss.pos_weight"] = ctx.where("loss.pos_weight", *v);
    } else {
      ctx.cfg.origin["loss.pos_weight"] = "default";
    }
    ctx.cfg.value_text["loss.pos_weight"] = text.empty() ? "null" : "[" + join(text) + "]";
  }
  s.finish();
}

void parse_optimizer(Context& ctx, const YAML::Node& node, OptimizerConfig& o) {
  Section s(ctx, node, "optimizer",
            {"type", "lr", "momentum", "dampening", "nesterov", "weight_decay", "maximize", "betas",
             "eps", "amsgrad"});
  o.type = s.get_choice("type", "sgd", {"sgd", "adam", "adamw"});
  o.lr = s.get_double("lr", o.type == "sgd" ? 0.01 : 1e-3, positive());
  o.weight_decay = s.get_double("weight_decay", o.type == "adamw" ? 0.01 : 0.0, non_negative());
  o.maximize = s.get_bool("maximize", false);
  if (o.type == "sgd") {
    o.momentum = s.get_double("momentum", 0.0, non_negative());
    o.dampening = s.get_double("dampening", 0.0, Range{0, 1, false, false});
    o.nesterov = s.get_bool("nesterov", false);
    if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
      s.bad("nesterov", node["nesterov"], "needs optimizer.momentum > 0 and dampening 0");
    }
  } else {
    o.eps = s.get_double("eps", 1e-8, positive());
    o.amsgrad = s.get_bool("amsgrad", false);
    if (auto betas = s.take("betas")) {
      if (!betas->IsSequence() || betas->size() != 2)
        s.bad("betas", *betas, "expected [beta1, beta2]");
      for (int i = 0; i < 2; ++i) {
        const double b = s.scalar<double>("betas", (*betas)[i], "[beta1, beta2] numbers");
        if (!(b >= 0 && b < 1)) s.bad("betas", (*betas)[i], "each beta must be in [0, 1)");
        (i == 0 ? o.beta1 : o.beta2) = b;
      }
      ctx.cfg.origin["optimizer.betas"] = ctx.where("optimizer.betas", *betas);
    } else {
      ctx.cfg.origin["optimizer.betas"] = "default";
    }
    ctx.cfg.value_text["optimizer.betas"] =
        "[" + yaml_double(o.beta1) + ", " + yaml_double(o.beta2) + "]";
  }
  s.finish();
}

void parse_schedule(Context& ctx, const YAML::Node& node, ScheduleConfig& c) {
  Section s(ctx, node, "schedule",
            {"type", "step_size", "gamma", "warmup_steps", "total_steps", "min_lr"});
  c.type = s.get_choice("type", "none", {"none", "step", "cosine"});
  if (c.type == "step") {
    c.step_size = s.get_int("step_size", 100, 1);
    c.gamma = s.get_double("gamma", 0.1, positive());
  } else if (c.type == "cosine") {
    c.warmup_steps = s.get_int("warmup_steps", 0, 0);
    c.total_steps = s.get_int("total_steps", 0, 0);
    c.min_lr = s.get_double("min_lr", 0.0, non_negative());
    if (c.total_steps > 0 && c.warmup_steps > c.total_steps) {
      s.bad("warmup_steps", node["warmup_steps"], "must be <= schedule.total_steps");
    }
  }
  s.finish();
}

void parse_scaler(Context& ctx, const YAML::Node& node, ScalerConfig& c) {
  Section s(ctx, node, "scaler",
            {"enabled", "init_scale", "growth_factor", "backoff_factor", "growth_interval",
             "min_scale", "hysteresis"});
  c.enabled = s.get_tristate("enabled", std::nullopt);
  c.init_scale = s.get_double("init_scale", 65536.0, positive());
  c.growth_factor = s.get_double("growth_factor", 2.0, Range{1, 1e300, true, false});
  c.backoff_factor = s.get_double("backoff_factor", 0.5, Range{0, 1, false, true});
  c.growth_interval = s.get_int("growth_interval", 2000, 0);
  c.min_scale = s.get_double("min_scale", 0.0, non_negative());
  c.hysteresis = s.get_int("hysteresis", 1, 1);
  if (c.min_scale > c.init_scale)
    s.bad("min_scale", node["min_scale"], "must be <= scaler.init_scale");
  s.finish();
}

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
  check_quotes(ctx, root, yaml_text, source);
  for (const auto& o : overrides) apply_override(ctx, root, o);

  Section top(ctx, root, "",
              {"name", "seed", "deterministic", "device", "precision", "master_weights", "steps",
               "epochs", "log_every", "eval_every", "checkpoint_every", "keep_last",
               "clip_grad_norm", "model", "data", "loss", "optimizer", "schedule", "scaler"});
  cfg.name = top.get_string("name", default_name);
  // The run directory is runs/<name>-<YYYYmmdd-HHMMSS>[-N]: a file name, at most 255 bytes.
  if (cfg.name.empty() || cfg.name.find('/') != std::string::npos || cfg.name.size() > 200) {
    top.bad("name", root["name"], "must be a non-empty name of at most 200 bytes without '/'");
  }
  cfg.seed = static_cast<uint64_t>(top.get_int("seed", 0, 0));
  // Checked against the model and device in build_from_config (runner/determinism.h).
  cfg.deterministic = top.get_bool("deterministic", true);
  cfg.device = top.get_string("device", "auto");
  if (cfg.device != "auto") {
    try {
      (void)Device(cfg.device);
    } catch (const Error&) {
      top.bad("device", root["device"], "expected auto, cpu, cuda or cuda:N");
    }
  }
  cfg.precision =
      top.get_choice("precision", "float32", {"float32", "tf32", "float16", "bfloat16"});
  cfg.master_weights = top.get_bool("master_weights", false);
  if (top.has("steps") && top.has("epochs")) {
    top.bad("epochs", root["epochs"], "give either steps or epochs, not both");
  }
  if (top.has("epochs")) {
    cfg.epochs = top.get_int("epochs", 1, 1);
    top.take("steps");
  } else {
    cfg.steps = top.get_int("steps", 100, 1);
    top.take("epochs");
  }
  cfg.log_every = top.get_int("log_every", 10, 0);
  cfg.eval_every = top.get_int("eval_every", 0, 0);
  cfg.checkpoint_every = top.get_int("checkpoint_every", 0, 0);
  cfg.keep_last = top.get_int("keep_last", 3, 0);
  cfg.clip_grad_norm = top.get_double("clip_grad_norm", 0.0, non_negative());

  parse_model(ctx, top.take("model").value_or(YAML::Node()), cfg.model);
  parse_data(ctx, top.take("data").value_or(YAML::Node()), cfg.data);
  parse_loss(ctx, top.take("loss").value_or(YAML::Node()), cfg.loss);
  parse_optimizer(ctx, top.take("optimizer").value_or(YAML::Node()), cfg.optimizer);
  parse_schedule(ctx, top.take("schedule").value_or(YAML::Node()), cfg.schedule);
  parse_scaler(ctx, top.take("scaler").value_or(YAML::Node()), cfg.scaler);
  top.finish("name");
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
  return parse_config(text, path, overrides, std::filesystem::path(path).stem().string());
}

}  // namespace mantissa::runner
