// A small JSON value for what the runner reads and writes: metrics.jsonl, summary.json, checkpoint
// metadata and safetensors headers. Objects keep their keys in insertion order so files read the
// way they were written. Integers are kept apart from doubles: a safetensors offset or a step count
// survives a round trip exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace mantissa::runner {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  Json(int v) : value_(static_cast<int64_t>(v)) {}
  Json(long v) : value_(static_cast<int64_t>(v)) {}
  Json(long long v) : value_(static_cast<int64_t>(v)) {}
  Json(unsigned v) : value_(static_cast<int64_t>(v)) {}
  Json(unsigned long v) : value_(static_cast<int64_t>(v)) {}
  Json(unsigned long long v) : value_(static_cast<int64_t>(v)) {}
  Json(double v) : value_(v) {}
  Json(float v) : value_(static_cast<double>(v)) {}
  Json(const char* s) : value_(std::string(s)) {}
  Json(std::string s) : value_(std::move(s)) {}
  Json(std::string_view s) : value_(std::string(s)) {}
  Json(Array a) : value_(std::move(a)) {}
  Json(Object o) : value_(std::move(o)) {}

  static Json array() { return Json(Array{}); }
  static Json object() { return Json(Object{}); }

  bool is_null() const { return std::holds_alternative<std::monostate>(value_); }
  bool is_bool() const { return std::holds_alternative<bool>(value_); }
  bool is_int() const { return std::holds_alternative<int64_t>(value_); }
  bool is_number() const { return is_int() || std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_array() const { return std::holds_alternative<Array>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }

  // Typed access; each throws mantissa::Error naming the expected and the actual kind.
  bool as_bool() const;
  int64_t as_int() const;  // an integer, or a double with an exact integer value
  double as_double() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object access. operator[] on a null value makes it an object; set() replaces an existing key.
  bool contains(std::string_view key) const;
  const Json* find(std::string_view key) const;
  const Json& at(std::string_view key) const;  // throws if missing
  Json& operator[](std::string_view key);
  Json& set(std::string_view key, Json value);
  // Array access.
  void push_back(Json value);
  size_t size() const;  // elements of an array or members of an object
  const Json& operator[](size_t index) const;

  // Compact one-line text (metrics.jsonl) or indented text (indent > 0). Doubles are written with
  // the fewest digits that read back to the same value; NaN and infinities, which JSON lacks, are
  // written as null.
  std::string dump(int indent = 0) const;
  // Parses a whole document; throws mantissa::Error with the line and column of a syntax error.
  // `what` names the source in messages (a file name, "safetensors header").
  static Json parse(std::string_view text, std::string_view what = "JSON");

  bool operator==(const Json& other) const { return value_ == other.value_; }

 private:
  void dump_to(std::string& out, int indent, int depth) const;
  const char* kind() const;
  std::variant<std::monostate, bool, int64_t, double, std::string, Array, Object> value_;
};

}  // namespace mantissa::runner
