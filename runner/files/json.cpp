// json::parse drives nlohmann's SAX parser (iterative, so deep input cannot overflow the stack)
// with a handler that builds the tree and refuses duplicate keys and deep nesting; json::dump is
// nlohmann's writer with our separators; JsonView's checked reads.
#include "runner/files/json.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <unordered_set>
#include <utility>
#include <vector>

#include "engine/error.h"
#include "runner/files/text.h"

namespace mantissa::runner {

// ---- writing ------------------------------------------------------------------------------------

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

std::string json::dump(const Json& j, int indent) {
  if (indent > 0) return j.dump(indent, ' ', false, Json::error_handler_t::replace);
  return space_separators(j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

Json json::number_or_null(double v) { return std::isfinite(v) ? Json(v) : Json(); }

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
  bool number_integer(Json::number_integer_t v) { return add(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return add(Json(v)); }
  bool number_float(Json::number_float_t v, const std::string&) { return add(Json(v)); }
  bool string(std::string& v) { return add(Json(std::move(v))); }
  bool binary(Json::binary_t&) { return false; }  // JSON text has no binary values

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

  bool parse_error(size_t position, const std::string&, const Json::exception& e) {
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
    if (stack_.size() >= static_cast<size_t>(json::kMaxDepth))
      fail(read() - 1, "nesting deeper than " + std::to_string(json::kMaxDepth) + " levels");
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
      stack_.back().get_ref<Json::array_t&>().push_back(std::move(v));
    } else {
      // Appended to the underlying vector: ordered_map's own insert searches for the key each
      // time (quadratic in the number of keys); the handler has already refused duplicates.
      auto& members = stack_.back().get_ref<Json::object_t&>();
      members.Container::emplace_back(std::move(keys_.back()), std::move(v));
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

Json json::parse(std::string_view text, std::string_view what) {
  Builder builder(text, what);
  // Errors throw from the handler, so a false return here cannot happen; checked all the same.
  const bool ok = Json::sax_parse(builder.begin(), builder.end(), &builder,
                                  Json::input_format_t::json, /*strict=*/true,
                                  /*ignore_comments=*/false);
  MT_CHECK(ok, what, ": not valid JSON");
  return builder.take();
}

// ---- reading ------------------------------------------------------------------------------------

const char* JsonView::kind() const {
  switch (j_->type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "binary data";
  }
}

bool JsonView::as_bool() const {
  MT_CHECK(is_bool(), "JSON: expected a boolean, got ", kind());
  return j_->get<bool>();
}

int64_t JsonView::as_int() const {
  if (j_->is_number_unsigned()) {
    const uint64_t u = j_->get<uint64_t>();
    MT_CHECK(u <= static_cast<uint64_t>(INT64_MAX),
             "JSON: expected an integer in int64 range, got ", u);
    return static_cast<int64_t>(u);
  }
  if (j_->is_number_integer()) return j_->get<int64_t>();
  if (j_->is_number_float()) {
    const double d = j_->get<double>();
    MT_CHECK(std::trunc(d) == d && std::fabs(d) < 9.2e18, "JSON: expected an integer, got ",
             dump());
    return static_cast<int64_t>(d);
  }
  MT_THROW("JSON: expected an integer, got ", kind());
}

uint64_t JsonView::as_uint() const {
  if (j_->is_number_unsigned()) return j_->get<uint64_t>();
  if (j_->is_number_integer()) {
    const int64_t i = j_->get<int64_t>();
    MT_CHECK(i >= 0, "JSON: expected a non-negative integer, got ", i);
    return static_cast<uint64_t>(i);
  }
  if (j_->is_number_float()) {
    const double d = j_->get<double>();
    MT_CHECK(std::trunc(d) == d && d >= 0.0 && d < 1.8e19,
             "JSON: expected a non-negative integer, got ", dump());
    return static_cast<uint64_t>(d);
  }
  MT_THROW("JSON: expected a non-negative integer, got ", kind());
}

double JsonView::as_double() const {
  // null stands for NaN/inf, which JSON cannot spell (see json::dump).
  if (is_null()) return std::nan("");
  MT_CHECK(is_number(), "JSON: expected a number, got ", kind());
  return j_->get<double>();
}

const std::string& JsonView::as_string() const {
  MT_CHECK(is_string(), "JSON: expected a string, got ", kind());
  return j_->get_ref<const std::string&>();
}

std::optional<JsonView> JsonView::find(std::string_view key) const {
  if (!is_object()) return std::nullopt;
  for (const auto& [k, v] : j_->get_ref<const Json::object_t&>())
    if (k == key) return JsonView(v);
  return std::nullopt;
}

JsonView JsonView::at(std::string_view key) const {
  MT_CHECK(is_object(), "JSON: expected an object with key '", key, "', got ", kind());
  const std::optional<JsonView> v = find(key);
  MT_CHECK(v.has_value(), "JSON: missing key '", key, "'");
  return *v;
}

size_t JsonView::size() const {
  MT_CHECK(is_array() || is_object(), "JSON: size() of ", kind());
  return j_->size();
}

JsonView JsonView::operator[](size_t index) const {
  MT_CHECK(is_array(), "JSON: expected an array, got ", kind());
  MT_CHECK(index < j_->size(), "JSON: index ", index, " out of range for an array of ", j_->size());
  return JsonView((*j_)[index]);
}

JsonView::Elements JsonView::elements() const {
  MT_CHECK(is_array(), "JSON: expected an array, got ", kind());
  return Elements(j_->get_ref<const Json::array_t&>());
}

JsonView::Members JsonView::members() const {
  MT_CHECK(is_object(), "JSON: expected an object, got ", kind());
  return Members(j_->get_ref<const Json::object_t&>());
}

}  // namespace mantissa::runner
