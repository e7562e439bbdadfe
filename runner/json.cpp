// Json's text side goes through nlohmann-json: parse() drives nlohmann's SAX parser (iterative, so
// deep input cannot overflow the stack) with a handler that builds our tree directly, and dump()
// converts the tree to nlohmann::ordered_json and lets it write the text. nlohmann keeps int64 and
// uint64 exact and writes doubles that read back bit for bit; it stays out of json.h so the
// installed headers need nothing beyond the standard library.
#include "runner/json.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <iterator>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "engine/error.h"
#include "runner/text.h"

namespace mantissa::runner {

const char* Json::kind() const {
  switch (value_.index()) {
    case 0:
      return "null";
    case 1:
      return "a boolean";
    case 2:
    case 3:
      return "an integer";
    case 4:
      return "a number";
    case 5:
      return "a string";
    case 6:
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
  if (const int64_t* i = std::get_if<int64_t>(&value_)) return *i;
  if (const uint64_t* u = std::get_if<uint64_t>(&value_))
    MT_THROW("JSON: expected an integer in int64 range, got ", *u);
  if (const double* d = std::get_if<double>(&value_)) {
    MT_CHECK(std::trunc(*d) == *d && std::fabs(*d) < 9.2e18, "JSON: expected an integer, got ",
             dump());
    return static_cast<int64_t>(*d);
  }
  MT_THROW("JSON: expected an integer, got ", kind());
}

uint64_t Json::as_uint() const {
  if (const uint64_t* u = std::get_if<uint64_t>(&value_)) return *u;
  if (const int64_t* i = std::get_if<int64_t>(&value_)) {
    MT_CHECK(*i >= 0, "JSON: expected a non-negative integer, got ", *i);
    return static_cast<uint64_t>(*i);
  }
  if (const double* d = std::get_if<double>(&value_)) {
    MT_CHECK(std::trunc(*d) == *d && *d >= 0.0 && *d < 1.8e19,
             "JSON: expected a non-negative integer, got ", dump());
    return static_cast<uint64_t>(*d);
  }
  MT_THROW("JSON: expected a non-negative integer, got ", kind());
}

double Json::as_double() const {
  if (const int64_t* i = std::get_if<int64_t>(&value_)) return static_cast<double>(*i);
  if (const uint64_t* u = std::get_if<uint64_t>(&value_)) return static_cast<double>(*u);
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

using Nl = nlohmann::ordered_json;

struct JsonCodec {
  static Nl to_nlohmann(const Json& j) {
    switch (j.value_.index()) {
      case 0:
        return nullptr;
      case 1:
        return std::get<bool>(j.value_);
      case 2:
        return std::get<int64_t>(j.value_);
      case 3:
        return std::get<uint64_t>(j.value_);
      case 4:
        return std::get<double>(j.value_);  // non-finite values are written as null
      case 5:
        return std::get<std::string>(j.value_);
      case 6: {
        Nl out = Nl::array();
        auto& arr = out.get_ref<Nl::array_t&>();
        arr.reserve(j.size());
        for (const Json& v : std::get<Json::Array>(j.value_)) arr.push_back(to_nlohmann(v));
        return out;
      }
      default: {
        Nl out = Nl::object();
        // Appended to the underlying vector: ordered_map's own insert searches for the key each
        // time (quadratic in the number of keys); ours are already unique.
        auto& members = out.get_ref<Nl::object_t&>();
        members.reserve(j.size());
        for (const auto& [k, v] : std::get<Json::Object>(j.value_))
          members.emplace_back(k, to_nlohmann(v));
        return out;
      }
    }
  }
};

namespace {

// nlohmann writes compact text without spaces. Our one-line files (metrics.jsonl, checkpoint
// metadata) have always had one after each ',' and ':' outside strings, as Python's json.dumps
// writes; they are put back so old and new lines read alike.
std::string space_separators(const std::string& compact) {
  std::string out;
  out.reserve(compact.size() + compact.size() / 8);
  bool in_string = false;
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    out += c;
    if (in_string) {
      if (c == '\\' && i + 1 < compact.size())
        out += compact[++i];  // \" or \\ does not end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':') {
      out += ' ';
    }
  }
  return out;
}

}  // namespace

std::string Json::dump(int indent) const {
  const Nl j = JsonCodec::to_nlohmann(*this);
  if (indent > 0) return j.dump(indent, ' ', false, Nl::error_handler_t::replace);
  return space_separators(j.dump(-1, ' ', false, Nl::error_handler_t::replace));
}

// ---- parsing ------------------------------------------------------------------------------------

namespace {

// nlohmann's message without its "[json.exception.parse_error.101] parse error at line 1,
// column 6: " prefix; we add our own source name and position.
std::string reason(const char* nlohmann_what) {
  std::string_view s = nlohmann_what;
  if (const size_t p = s.find("] "); p != std::string_view::npos) s.remove_prefix(p + 2);
  if (s.starts_with("parse error"))
    if (const size_t p = s.find(": "); p != std::string_view::npos) s.remove_prefix(p + 2);
  return printable_excerpt(s);
}

// A char iterator over the text that records how far nlohmann's parser has read, so the errors
// the handler finds itself (duplicate key, nesting) name a line and column too.
struct TrackedChar {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* p;
  const char** read_end;

  reference operator*() const { return *p; }
  TrackedChar& operator++() {
    *read_end = ++p;
    return *this;
  }
  TrackedChar operator++(int) {
    TrackedChar old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackedChar& other) const { return p == other.p; }
};

// The SAX handler: builds the tree as nlohmann's parser reports values. Open arrays and objects
// wait on a stack and join their parent when closed; keys wait on their own stack until their
// value is complete.
class Builder {
 public:
  Builder(std::string_view text, std::string_view what)
      : text_(text), what_(what), read_end_(text.data()) {}

  TrackedChar begin() { return {text_.data(), &read_end_}; }
  TrackedChar end() { return {text_.data() + text_.size(), &read_end_}; }
  Json take() { return std::move(root_); }

  bool null() { return add(Json()); }
  bool boolean(bool v) { return add(Json(v)); }
  bool number_integer(Nl::number_integer_t v) { return add(Json(static_cast<long long>(v))); }
  bool number_unsigned(Nl::number_unsigned_t v) {
    return add(Json(static_cast<unsigned long long>(v)));
  }
  bool number_float(Nl::number_float_t v, const std::string&) { return add(Json(v)); }
  bool string(std::string& v) { return add(Json(std::move(v))); }
  bool binary(Nl::binary_t&) { return false; }  // JSON text has no binary values

  bool start_object(size_t) {
    open(Json::object());
    // A set, not a search of the object: a hostile safetensors header may hold millions of keys.
    seen_.emplace_back();
    return true;
  }
  bool key(std::string& k) {
    if (!seen_.back().insert(k).second)
      fail(read(), "duplicate key '" + printable_excerpt(k) + "'");
    keys_.push_back(std::move(k));
    return true;
  }
  bool end_object() {
    seen_.pop_back();
    return close();
  }
  bool start_array(size_t) {
    open(Json::array());
    return true;
  }
  bool end_array() { return close(); }

  bool parse_error(size_t position, const std::string&, const Nl::exception& e) {
    // `position` counts the bytes read, the offending one included.
    fail(position > 0 ? position - 1 : 0, reason(e.what()));
  }

 private:
  size_t read() const { return static_cast<size_t>(read_end_ - text_.data()); }

  [[noreturn]] void fail(size_t index, std::string_view why) const {
    index = std::min(index, text_.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < index; ++i)
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    MT_THROW(what_, ": ", why, " at line ", line, ", column ", index - line_start + 1);
  }

  void open(Json container) {
    if (stack_.size() >= static_cast<size_t>(Json::kMaxDepth))
      fail(read() - 1, "nesting deeper than " + std::to_string(Json::kMaxDepth) + " levels");
    stack_.push_back(std::move(container));
  }
  bool close() {
    Json done = std::move(stack_.back());
    stack_.pop_back();
    return add(std::move(done));
  }
  bool add(Json v) {
    if (stack_.empty()) {
      root_ = std::move(v);
    } else if (stack_.back().is_array()) {
      stack_.back().as_array().push_back(std::move(v));
    } else {
      stack_.back().as_object().emplace_back(std::move(keys_.back()), std::move(v));
      keys_.pop_back();
    }
    return true;
  }

  std::string_view text_;
  std::string_view what_;
  const char* read_end_;
  Json root_;
  std::vector<Json> stack_;
  std::vector<std::string> keys_;
  std::vector<std::unordered_set<std::string>> seen_;
};

}  // namespace

Json Json::parse(std::string_view text, std::string_view what) {
  Builder builder(text, what);
  // Errors throw from the handler, so a false return here cannot happen; checked all the same.
  const bool ok = Nl::sax_parse(builder.begin(), builder.end(), &builder, Nl::input_format_t::json,
                                /*strict=*/true, /*ignore_comments=*/false);
  MT_CHECK(ok, what, ": not valid JSON");
  return builder.take();
}

}  // namespace mantissa::runner
