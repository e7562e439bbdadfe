// Config -> YAML text (the run directory's resolved.yaml and the text stored in checkpoints), by
// walking the declarations of config_schema.h. Written by hand rather than with YAML::Emitter so
// that doubles keep their shortest round-trip form (0.1, not 0.10000000000000001) and only the keys
// that apply to the chosen types appear — the parser refuses the others.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <type_traits>

#include "runner/config/config.h"
#include "runner/config/config_schema.h"
#include "runner/files/hash.h"
#include "runner/files/text.h"

namespace mantissa::runner {
namespace {

std::string num(double v) {
  std::string s = yaml_double(v);
  // Keep it a float to the eye ("1.0"); the parser accepts either.
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string boolean(bool b) { return b ? "true" : "false"; }

std::string list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + str(v[i]);
  return out + "]";
}

std::string int_list(const std::vector<int64_t>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + "]";
}

std::string value(int64_t x) { return std::to_string(x); }
std::string value(uint64_t x) { return std::to_string(x); }
std::string value(double x) { return num(x); }
std::string value(bool b) { return boolean(b); }
std::string value(const std::optional<bool>& b) { return b ? boolean(*b) : "auto"; }
std::string value(DType t) { return std::string(dtype_name(t)); }
std::string value(char c) { return str(std::string(1, c)); }
std::string value(const std::vector<std::string>& v) { return list(v); }
std::string value(const std::vector<int64_t>& v) { return int_list(v); }
std::string value(const std::vector<double>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + num(v[i]);
  return out + "]";
}
std::string value(const BlockSelection& b) { return b.all ? "true" : int_list(b.blocks); }
std::string value(const std::pair<double, double>& p) {
  return value(std::vector<double>{p.first, p.second});
}
template <size_t N>
std::string value(const std::array<double, N>& a) {
  return value(std::vector<double>(a.begin(), a.end()));
}
template <schema::NamedEnum E>
std::string value(E e) {
  return schema::enum_name(e);
}

template <typename T>
bool unset(const T& v) {
  if constexpr (std::is_arithmetic_v<T>) {
    return v == T{};
  } else if constexpr (requires { v.empty(); }) {
    return v.empty();
  } else {
    return false;
  }
}

// Writes the keys of one section that apply to its type, in declaration order: as a block map
// (`key: value` lines at `indent`) or, for a list entry, as one flow map (`{type: linear, ...}`).
class Writer {
 public:
  Writer(std::ostream& os, std::string indent, bool flow)
      : os_(os), indent_(std::move(indent)), flow_(flow) {}

  template <typename T>
  void field(const schema::Key<T>& k) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (k.is_selector) type_ = *k.member;
    }
    if (!k.applies(type_) || (k.omit_empty && unset(*k.member)) ||
        (k.omit_if && k.omit_if(*k.member)))
      return;
    if constexpr (std::is_same_v<T, std::vector<LayerSpec>>) {
      os_ << indent_ << k.name << ":\n";
      for (auto& l : *k.member) {
        os_ << indent_ << "  - {";
        Writer w(os_, "", true);
        schema::describe(w, l);
        os_ << "}\n";
      }
    } else if constexpr (std::is_same_v<T, std::string>) {
      put(k.name, k.choices.empty() ? str(*k.member) : *k.member);
    } else {
      put(k.name, value(*k.member));
    }
  }
  // The second when it is set (epochs, layers), else the first.
  template <typename A, typename B>
  void either(const schema::Key<A>& a, const schema::Key<B>& b) {
    if (!unset(*b.member)) {
      field(b);
    } else {
      field(a);
    }
  }
  void rule(const schema::Rule&) {}
  template <typename S>
  void section(const char* name, S& s, const char*, const std::vector<std::string>& only = {}) {
    if (!only.empty() && std::find(only.begin(), only.end(), type_) == only.end()) return;
    std::ostringstream body;
    Writer w(body, indent_ + "  ", false);
    schema::describe(w, s);
    if constexpr (requires { S::kOmittedWhenDefault; }) {
      S defaults{};
      std::ostringstream default_body;
      Writer d(default_body, indent_ + "  ", false);
      schema::describe(d, defaults);
      if (body.str() == default_body.str()) return;
    }
    os_ << indent_ << name << ":\n" << body.str();
  }

 private:
  void put(const char* key, const std::string& text) {
    if (flow_) {
      os_ << (first_ ? "" : ", ") << key << ": " << text;
      first_ = false;
    } else {
      os_ << indent_ << key << ": " << text << "\n";
    }
  }

  std::ostream& os_;
  std::string indent_;
  bool flow_;
  bool first_ = true;
  std::string type_;
};

}  // namespace

std::string to_yaml(const Config& config) {
  std::ostringstream os;
  os << "# resolved config: every key with its value (docs/configs.md)\n";
  // The declarations bind mutable members (the parser writes through them); writing only reads.
  Config c = config;
  Writer w(os, "", false);
  schema::describe(w, c);
  return os.str();
}

std::string config_hash(const std::string& text) { return Fnv1a64().add(text).hex(); }

}  // namespace mantissa::runner
