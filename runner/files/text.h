// Small text helpers shared by the runner and the CLI, so messages format shapes and engine
// errors the same way everywhere.
#pragma once

#include <charconv>
#include <cmath>
#include <ctime>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/shape.h"

namespace mantissa::runner {

// Input text quoted in an error message: bytes outside printable ASCII as \xNN, and cut short
// after `limit` bytes (a string token of a hostile file may be megabytes long).
inline std::string printable_excerpt(std::string_view s, size_t limit = 160) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < s.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > limit) out += "...";
  return out;
}

// The items with `sep` between them.
inline std::string join(const std::vector<std::string>& v, const std::string& sep = ", ") {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// "[2, 3]", as the engine prints shapes in its errors.
inline std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// The first line of a message (engine errors may carry more), for one-line config errors.
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The shortest text that reads back as the same double ("0.1", "1e-08"), with YAML's spellings
// of the non-finite values (".nan", ".inf", "-.inf"), for configs and their messages.
inline std::string yaml_double(double v) {
  if (std::isnan(v)) return ".nan";
  if (std::isinf(v)) return v > 0 ? ".inf" : "-.inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// The current UTC time in strftime `format`.
inline std::string utc_now(const char* format) {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  return std::string(buf, std::strftime(buf, sizeof buf, format, &tm));
}

}  // namespace mantissa::runner
