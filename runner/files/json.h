// JSON for what the runner reads and writes: metrics.jsonl, summary.json, checkpoint metadata and
// safetensors headers. The tree is nlohmann-json's ordered_json: objects keep their keys in
// insertion order so files read the way they were written, and integers stay exact (any int64,
// and unsigned values up to UINT64_MAX: a safetensors offset, a step count, a seed). Writers build
// it with nlohmann's own API.
//
// What this header adds is what a reader of files that may be hostile needs:
// - json::parse refuses duplicate keys and deep nesting, naming the line and column;
// - json::dump writes our one-line form and never fails on a string that is not UTF-8;
// - JsonView reads a tree with checks that throw mantissa::Error naming the expected and the
//   actual kind (nlohmann's own get<int64_t>() would read 3.5 as 3, and its errors are not ours).
//
// Internal to the files that read and write JSON (not installed): the API hands out typed values
// (TrainerState, LoaderPosition, the metrics structs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace mantissa::runner {

using Json = nlohmann::ordered_json;

namespace json {

// Arrays and objects nested deeper than this are refused by parse() (with the position), so a
// hostile file cannot exhaust the stack of the code that walks or destroys the tree.
inline constexpr int kMaxDepth = 256;

// Parses a whole document (RFC 8259; no comments). Throws mantissa::Error naming `what` (a file
// name, "safetensors header"), the problem and its line and column: a syntax error, a string that
// is not valid UTF-8 or holds a raw control character, a number too large for a double, nesting
// deeper than kMaxDepth, or a key repeated within one object (duplicate keys are refused, never
// silently resolved to the first or the last). Integers outside int64 and uint64 read as doubles.
Json parse(std::string_view text, std::string_view what = "JSON");

// Compact one-line text (metrics.jsonl: `{"step": 1, "loss": 0.5}`, a space after each ',' and
// ':') or indented text (indent > 0). Integers are written exactly; doubles with the fewest digits
// that read back to the same value, always with a '.' or an exponent ("3.0") so they read back as
// doubles; NaN and infinities, which JSON lacks, as null. A string that is not valid UTF-8 is
// written with U+FFFD in place of each bad byte sequence, so the text always parses.
std::string dump(const Json& j, int indent = 0);

// NaN and infinities as null (as dump() writes them), other values as they are.
Json number_or_null(double v);

}  // namespace json

// A checked, read-only view of a parsed tree. It does not own the tree.
class JsonView {
 public:
  JsonView(const Json& j) : j_(&j) {}  // NOLINT: a view of any tree

  bool is_null() const { return j_->is_null(); }
  bool is_bool() const { return j_->is_boolean(); }
  // An integer, signed or above INT64_MAX (never a double, even one with an integer value).
  bool is_int() const { return j_->is_number_integer(); }
  bool is_number() const { return j_->is_number(); }
  bool is_string() const { return j_->is_string(); }
  bool is_array() const { return j_->is_array(); }
  bool is_object() const { return j_->is_object(); }

  // Typed reads; each throws mantissa::Error naming the expected and the actual kind.
  bool as_bool() const;
  int64_t as_int() const;    // an integer in int64 range, or a double with such an exact value
  uint64_t as_uint() const;  // the same for a non-negative integer up to UINT64_MAX
  double as_double() const;  // any number; null reads as NaN (see json::dump)
  const std::string& as_string() const;

  // Object access: find() is nullopt for a missing key (or a value that is not an object); at()
  // throws for one.
  std::optional<JsonView> find(std::string_view key) const;
  bool contains(std::string_view key) const { return find(key).has_value(); }
  JsonView at(std::string_view key) const;
  // Array access.
  size_t size() const;  // elements of an array or members of an object
  JsonView operator[](size_t index) const;

  // The elements of an array (throws for another kind), as views.
  class Elements;
  Elements elements() const;
  // The members of an object (throws for another kind), as (key, view) pairs.
  class Members;
  Members members() const;

  std::string dump() const { return json::dump(*j_); }
  const Json& tree() const { return *j_; }

 private:
  const char* kind() const;
  const Json* j_;
};

class JsonView::Elements {
 public:
  class Iterator {
   public:
    explicit Iterator(Json::array_t::const_iterator it) : it_(it) {}
    JsonView operator*() const { return JsonView(*it_); }
    Iterator& operator++() { return ++it_, *this; }
    bool operator==(const Iterator& other) const { return it_ == other.it_; }

   private:
    Json::array_t::const_iterator it_;
  };
  explicit Elements(const Json::array_t& a) : a_(&a) {}
  Iterator begin() const { return Iterator(a_->begin()); }
  Iterator end() const { return Iterator(a_->end()); }
  size_t size() const { return a_->size(); }

 private:
  const Json::array_t* a_;
};

class JsonView::Members {
 public:
  class Iterator {
   public:
    explicit Iterator(Json::object_t::const_iterator it) : it_(it) {}
    std::pair<const std::string&, JsonView> operator*() const {
      return {it_->first, JsonView(it_->second)};
    }
    Iterator& operator++() { return ++it_, *this; }
    bool operator==(const Iterator& other) const { return it_ == other.it_; }

   private:
    Json::object_t::const_iterator it_;
  };
  explicit Members(const Json::object_t& o) : o_(&o) {}
  Iterator begin() const { return Iterator(o_->begin()); }
  Iterator end() const { return Iterator(o_->end()); }
  size_t size() const { return o_->size(); }

 private:
  const Json::object_t* o_;
};

}  // namespace mantissa::runner
