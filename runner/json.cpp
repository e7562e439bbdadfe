#include "runner/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <unordered_set>

#include "engine/error.h"

namespace mantissa::runner {

const char* Json::kind() const {
  switch (value_.index()) {
    case 0:
      return "null";
    case 1:
      return "a boolean";
    case 2:
      return "an integer";
    case 3:
      return "a number";
    case 4:
      return "a string";
    case 5:
      return "an array";
    default:
      return "an object";
  }
}

bool Json::as_bool() const {
  MT_CHECK(is_bool(), "JSON: expected a boolean, got ", kind());
  return std::get<bool>(value_);
}

int64_t Json::as_int() const {
  if (is_int()) return std::get<int64_t>(value_);
  if (const double* d = std::get_if<double>(&value_)) {
    MT_CHECK(std::trunc(*d) == *d && std::fabs(*d) < 9.2e18, "JSON: expected an integer, got ",
             dump());
    return static_cast<int64_t>(*d);
  }
  MT_THROW("JSON: expected an integer, got ", kind());
}

double Json::as_double() const {
  if (is_int()) return static_cast<double>(std::get<int64_t>(value_));
  // null stands for NaN/inf, which JSON cannot spell (see dump()).
  if (is_null()) return std::nan("");
  MT_CHECK(std::holds_alternative<double>(value_), "JSON: expected a number, got ", kind());
  return std::get<double>(value_);
}

const std::string& Json::as_string() const {
  MT_CHECK(is_string(), "JSON: expected a string, got ", kind());
  return std::get<std::string>(value_);
}
const Json::Array& Json::as_array() const {
  MT_CHECK(is_array(), "JSON: expected an array, got ", kind());
  return std::get<Array>(value_);
}
Json::Array& Json::as_array() {
  MT_CHECK(is_array(), "JSON: expected an array, got ", kind());
  return std::get<Array>(value_);
}
const Json::Object& Json::as_object() const {
  MT_CHECK(is_object(), "JSON: expected an object, got ", kind());
  return std::get<Object>(value_);
}
Json::Object& Json::as_object() {
  MT_CHECK(is_object(), "JSON: expected an object, got ", kind());
  return std::get<Object>(value_);
}

const Json* Json::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : std::get<Object>(value_))
    if (k == key) return &v;
  return nullptr;
}
bool Json::contains(std::string_view key) const { return find(key) != nullptr; }

const Json& Json::at(std::string_view key) const {
  const Json* v = find(key);
  MT_CHECK(is_object(), "JSON: expected an object with key '", key, "', got ", kind());
  MT_CHECK(v != nullptr, "JSON: missing key '", key, "'");
  return *v;
}

Json& Json::operator[](std::string_view key) {
  if (is_null()) value_ = Object{};
  Object& obj = as_object();
  for (auto& [k, v] : obj)
    if (k == key) return v;
  obj.emplace_back(std::string(key), Json());
  return obj.back().second;
}

Json& Json::set(std::string_view key, Json value) {
  Json& slot = (*this)[key];
  slot = std::move(value);
  return *this;
}

void Json::push_back(Json value) {
  if (is_null()) value_ = Array{};
  as_array().push_back(std::move(value));
}

size_t Json::size() const {
  if (is_array()) return std::get<Array>(value_).size();
  if (is_object()) return std::get<Object>(value_).size();
  MT_THROW("JSON: size() of ", kind());
}

const Json& Json::operator[](size_t index) const {
  const Array& arr = as_array();
  MT_CHECK(index < arr.size(), "JSON: index ", index, " out of range for an array of ", arr.size());
  return arr[index];
}

// ---- writing ------------------------------------------------------------------------------------

namespace {

void write_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  if (indent <= 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  switch (value_.index()) {
    case 0:
      out += "null";
      return;
    case 1:
      out += std::get<bool>(value_) ? "true" : "false";
      return;
    case 2:
      out += std::to_string(std::get<int64_t>(value_));
      return;
    case 3: {
      const double d = std::get<double>(value_);
      if (!std::isfinite(d)) {
        out += "null";
        return;
      }
      char buf[32];
      auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d);
      std::string_view text(buf, static_cast<size_t>(end - buf));
      out += text;
      // Keep it a number that reads back as a double, not an integer.
      if (text.find_first_of(".eEn") == std::string_view::npos) out += ".0";
      return;
    }
    case 4:
      write_string(out, std::get<std::string>(value_));
      return;
    case 5: {
      const Array& arr = std::get<Array>(value_);
      out += '[';
      for (size_t i = 0; i < arr.size(); ++i) {
        if (i) out += indent > 0 ? "," : ", ";
        newline(out, indent, depth + 1);
        arr[i].dump_to(out, indent, depth + 1);
      }
      if (!arr.empty()) newline(out, indent, depth);
      out += ']';
      return;
    }
    default: {
      const Object& obj = std::get<Object>(value_);
      out += '{';
      for (size_t i = 0; i < obj.size(); ++i) {
        if (i) out += indent > 0 ? "," : ", ";
        newline(out, indent, depth + 1);
        write_string(out, obj[i].first);
        out += ": ";
        obj[i].second.dump_to(out, indent, depth + 1);
      }
      if (!obj.empty()) newline(out, indent, depth);
      out += '}';
      return;
    }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

// ---- parsing ------------------------------------------------------------------------------------

namespace {

class Parser {
 public:
  Parser(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  Json document() {
    skip_space();
    Json v = value(0);
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(std::string_view why) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    MT_THROW(what_, ": ", why, " at line ", line, ", column ", column);
  }

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json value(int depth) {
    if (depth > 256) fail("nesting deeper than 256 levels");
    if (pos_ >= text_.size()) fail("unexpected end of input");
    const char c = text_[pos_];
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (consume("true")) return Json(true);
    if (consume("false")) return Json(false);
    if (consume("null")) return Json();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(std::string("unexpected character '") + c + "'");
  }

  Json object(int depth) {
    ++pos_;  // '{'
    Json obj = Json::object();
    // A set, not obj.contains(): a hostile safetensors header may hold millions of keys.
    std::unordered_set<std::string> seen;
    skip_space();
    if (consume("}")) return obj;
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a string key");
      std::string key = string();
      if (!seen.insert(key).second) fail("duplicate key '" + key + "'");
      skip_space();
      if (!consume(":")) fail("expected ':'");
      skip_space();
      Json v = value(depth + 1);
      obj.as_object().emplace_back(std::move(key), std::move(v));
      skip_space();
      if (consume("}")) return obj;
      if (!consume(",")) fail("expected ',' or '}'");
    }
  }

  Json array(int depth) {
    ++pos_;  // '['
    Json arr = Json::array();
    skip_space();
    if (consume("]")) return arr;
    for (;;) {
      skip_space();
      arr.push_back(value(depth + 1));
      skip_space();
      if (consume("]")) return arr;
      if (!consume(",")) fail("expected ',' or ']'");
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > text_.size()) fail("truncated \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<unsigned>(h - 'A' + 10);
      else
        fail("bad \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    ++pos_;  // '"'
    std::string out;
    for (;;) {
      if (pos_ >= text_.size()) fail("unterminated string");
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) fail("unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {
            if (!consume("\\u")) fail("unpaired surrogate in \\u escape");
            const unsigned low = hex4();
            if (low < 0xDC00 || low >= 0xE000) fail("bad surrogate pair in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail(std::string("bad escape '\\") + e + "'");
      }
    }
  }

  Json number() {
    const size_t start = pos_;
    if (text_[pos_] == '-') ++pos_;
    bool integral = true;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c >= '0' && c <= '9') {
        ++pos_;
      } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
        integral = false;
        ++pos_;
      } else {
        break;
      }
    }
    const char* first = text_.data() + start;
    const char* last = text_.data() + pos_;
    if (integral) {
      int64_t v = 0;
      auto [ptr, ec] = std::from_chars(first, last, v);
      if (ec == std::errc() && ptr == last) return Json(static_cast<long long>(v));
      // Too large for int64: fall through to a double.
    }
    double d = 0;
    auto [ptr, ec] = std::from_chars(first, last, d);
    if (ec != std::errc() || ptr != last) {
      pos_ = start;
      fail("malformed number");
    }
    return Json(d);
  }

  std::string_view text_;
  std::string_view what_;
  size_t pos_ = 0;
};

}  // namespace

Json Json::parse(std::string_view text, std::string_view what) {
  return Parser(text, what).document();
}

}  // namespace mantissa::runner
