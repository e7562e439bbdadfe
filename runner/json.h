// A small JSON value for what the runner reads and writes: metrics.jsonl, summary.json, checkpoint
// metadata and safetensors headers. Objects keep their keys in insertion order so files read the
// way they were written. Integers are kept apart from doubles and stay exact: any int64, and
// unsigned values up to UINT64_MAX (a safetensors offset, a step count, a seed).
//
// Internal to the files that read and write those (not installed): the API hands out typed
// values (TrainerState, LoaderPosition, the metrics structs). Text goes through nlohmann-json
// (runner/json.cpp).
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

  // Arrays and objects nested deeper than this are refused by parse() (with the position), so a
  // hostile file cannot exhaust the stack of the code that walks or destroys the tree.
  static constexpr int kMaxDepth = 256;

  Json() = default;  // null
  Json(std::nullptr_t) {}
  Json(bool b) : value_(b) {}
  Json(int v) : value_(static_cast<int64_t>(v)) {}
  Json(long v) : value_(static_cast<int64_t>(v)) {}
  Json(long long v) : value_(static_cast<int64_t>(v)) {}
  Json(unsigned v) : value_(static_cast<int64_t>(v)) {}
  Json(unsigned long v) { set_unsigned(v); }
  Json(unsigned long long v) { set_unsigned(v); }
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
  // An integer, signed or above INT64_MAX (never a double, even one with an integer value).
  bool is_int() const {
    return std::holds_alternative<int64_t>(value_) || std::holds_alternative<uint64_t>(value_);
  }
  bool is_number() const { return is_int() || std::holds_alternative<double>(value_); }
  bool is_string() const { return std::holds_alternative<std::string>(value_); }
  bool is_array() const { return std::holds_alternative<Array>(value_); }
  bool is_object() const { return std::holds_alternative<Object>(value_); }

  // Typed access; each throws mantissa::Error naming the expected and the actual kind.
  bool as_bool() const;
  int64_t as_int() const;    // an integer in int64 range, or a double with such an exact value
  uint64_t as_uint() const;  // the same for a non-negative integer up to UINT64_MAX
  double as_double() const;  // any number; null reads as NaN (see dump())
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

  // Compact one-line text (metrics.jsonl: `{"step": 1, "loss": 0.5}`, a space after each ',' and
  // ':') or indented text (indent > 0). Integers are written exactly; doubles with the fewest
  // digits that read back to the same value, always with a '.' or an exponent ("3.0") so they read
  // back as doubles; NaN and infinities, which JSON lacks, as null. A string that is not valid
  // UTF-8 is written with U+FFFD in place of each bad byte sequence, so the text always parses.
  std::string dump(int indent = 0) const;
  // Parses a whole document (RFC 8259; no comments). Throws mantissa::Error naming `what` (a file
  // name, "safetensors header"), the problem and its line and column: a syntax error, a string
  // that is not valid UTF-8 or holds a raw control character, a number too large for a double,
  // nesting deeper than kMaxDepth, or a key repeated within one object (duplicate keys are
  // refused, never silently resolved to the first or the last). Integers outside int64 and uint64
  // read as doubles.
  static Json parse(std::string_view text, std::string_view what = "JSON");

  bool operator==(const Json& other) const { return value_ == other.value_; }

 private:
  friend struct JsonCodec;  // json.cpp: conversion to and from nlohmann::json
  // A uint64_t alternative only above INT64_MAX, so each integer has one representation and
  // operator== compares values.
  void set_unsigned(unsigned long long v) {
    if (v <= static_cast<unsigned long long>(INT64_MAX))
      value_ = static_cast<int64_t>(v);
    else
      value_ = static_cast<uint64_t>(v);
  }
  const char* kind() const;
  std::variant<std::monostate, bool, int64_t, uint64_t, double, std::string, Array, Object> value_;
};

}  // namespace mantissa::runner
