// The pieces a run-config schema is written with (runner/config/config_schema.h): a key (Key: its
// member, checks, the types it applies to, its documentation), a check across keys (Rule), and the
// rows of a section whose options are a variant of per-type structs (VariantKey, variant_keys).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "engine/error.h"

namespace mantissa::runner::schema {

// A closed or open interval for numbers; the message names it ("must be in [0, 1)").
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const {
    return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  }
  bool bounded() const { return std::isfinite(lo) || std::isfinite(hi); }
};

// An options enum whose values have names: `option_names(E)`, found by ADL, lists them in the
// values' order (0, 1, ...); the config reads and writes the names.
template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { option_names(e) } -> std::convertible_to<const std::vector<std::string>&>;
};
template <NamedEnum E>
const std::string& enum_name(E e) {
  const auto& names = option_names(e);
  const auto i = static_cast<size_t>(static_cast<std::underlying_type_t<E>>(e));
  MT_CHECK(i < names.size(), "config: no name for value ", i, " of an option enum");
  return names[i];
}

// A fixed number of numbers: [a, b, c] (Muon's ns_coefficients).
template <typename T>
inline constexpr bool kIsNumberArray = false;
template <size_t N>
inline constexpr bool kIsNumberArray<std::array<double, N>> = true;

// One key. T is int64_t, uint64_t, double, bool, std::optional<bool> (true/false/auto),
// std::string (free text, or a choice with one_of), DType (a choice), a NamedEnum (a choice of
// its names), char (one character), std::vector<std::string>, std::vector<int64_t> (sizes),
// std::vector<double> (a number or a list), std::pair<double, double>, std::array<double, N>,
// BlockSelection (true, false or indices) or std::vector<LayerSpec>.
template <typename T>
struct Key {
  Key(const char* name, T& member) : name(name), member(&member) {}

  const char* name;
  T* member;
  std::string help;
  std::vector<std::string> only;  // values of the section's selector it applies to; empty: all
  bool is_selector = false;       // the section's `type`: later keys' `only` refers to its value
  bool is_required = false;
  bool omit_empty = false;  // left out of resolved.yaml while empty
  // Left out of resolved.yaml while it holds (a key added with a default that is not empty, so
  // that configs written before it keep their text and hash).
  std::function<bool(const T&)> omit_if;
  Range range{};  // numbers, and each number of a list
  int64_t min_int = std::numeric_limits<int64_t>::min();
  int64_t max_int = std::numeric_limits<int64_t>::max();
  std::vector<std::string> choices;                 // std::string and DType
  std::vector<std::pair<std::string, T>> per_type;  // defaults that depend on the selector
  std::function<T()> computed_default;              // a default taken from another key
  std::string default_help;                         // the docs' default column, when not *member
  std::function<std::string(const T&)> check;       // "" or the problem with the value
  std::string check_help;                           // the docs' range column for `check`

  Key& doc(std::string text) { return help = std::move(text), *this; }
  Key& applies_to(std::vector<std::string> types) { return only = std::move(types), *this; }
  Key& selector() { return is_selector = true, *this; }
  Key& required() { return is_required = true, *this; }
  Key& optional_output() { return omit_empty = true, *this; }
  Key& omitted_when(T value) {
    omit_if = [value](const T& v) { return v == value; };
    return *this;
  }
  Key& in(Range r) { return range = r, *this; }
  Key& positive() { return in(Range{0, std::numeric_limits<double>::infinity(), true, false}); }
  Key& non_negative() { return in(Range{0, std::numeric_limits<double>::infinity()}); }
  Key& at_least(int64_t lo) { return min_int = lo, *this; }
  Key& between(int64_t lo, int64_t hi) { return min_int = lo, max_int = hi, *this; }
  Key& one_of(std::vector<std::string> c) { return choices = std::move(c), *this; }
  Key& default_for(std::vector<std::string> types, T value) {
    for (auto& t : types) per_type.emplace_back(std::move(t), value);
    return *this;
  }
  Key& default_from(std::function<T()> f, std::string text) {
    computed_default = std::move(f), default_help = std::move(text);
    return *this;
  }
  Key& default_text(std::string text) { return default_help = std::move(text), *this; }
  Key& checked(std::function<std::string(const T&)> f, std::string text) {
    check = std::move(f), check_help = std::move(text);
    return *this;
  }

  bool applies(const std::string& type) const {
    if (only.empty()) return true;
    for (const auto& o : only) {
      if (o == type) return true;
    }
    return false;
  }
};

template <typename T>
Key<T> key(const char* name, T& member) {
  return Key<T>(name, member);
}

// A check across keys, run once the keys before it are read: `ok()` false reports `problem` on
// `key` (the key's value and line in the message).
struct Rule {
  const char* key;
  std::vector<std::string> only;
  std::function<bool()> ok;
  std::string problem;
};

// ---- sections whose options are a variant of per-type structs (data, loss, optimizer, schedule)
//
// The section holds `type` and `options`, a std::variant with one options struct per type, each
// listing its fields once in a static `each`. Its keys are rows, in resolved.yaml's order, with
// their checks and documentation; which types take a key, its C++ type and its default for each
// type come from the structs, so a new option is a member there and a row here. A key added later
// is left out of resolved.yaml while it has its default (`optional`), so the config hash of every
// existing run stays as it was.
struct VariantKey {
  const char* name = nullptr;
  Range range = {};  // numbers
  const char* help = "";
  std::vector<std::string> not_for = {};  // types whose options have the field, but not the key
  bool optional = false;
  int64_t min_int = std::numeric_limits<int64_t>::min();  // integers
  int64_t max_int = std::numeric_limits<int64_t>::max();
  std::vector<std::string> choices = {};  // strings
  const char* default_text = nullptr;     // the docs' default, when not the value
  // Types the row applies to, of those whose options have the field; empty: all of them. A key
  // whose meaning or checks differ by type is one row per type (its own documentation line).
  std::vector<std::string> only = {};
  bool required = false;  // no default: the config must give it
  bool nonzero = false;   // numbers: "cannot be 0"
  // The default is the value of this other key of the same options (maxpool2d's stride: kernel).
  const char* default_from = nullptr;
};

// Whether `row` binds the field of `type`'s options (given that they have one of its name).
inline bool row_takes(const VariantKey& row, const std::string& type) {
  const auto has = [&type](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), type) != v.end();
  };
  return !has(row.not_for) && (row.only.empty() || has(row.only));
}

// Each type's default options, in the variant's order.
template <typename Variant>
const std::vector<Variant>& variant_defaults() {
  static const std::vector<Variant> all = [] {
    std::vector<Variant> v;
    [&v]<size_t... I>(std::index_sequence<I...>) { (v.emplace_back(std::in_place_index<I>), ...); }
    (std::make_index_sequence<std::variant_size_v<Variant>>());
    return v;
  }();
  return all;
}

// Makes `held` the alternative `type` names in `types` (that type's default options when it
// held another); throws "<section>.type '<type>' is not <noun>" for a type not in `types`.
template <typename Variant>
void select_variant(Variant& held, const std::string& type, const std::vector<std::string>& types,
                    const char* section, const char* noun) {
  const auto it = std::find(types.begin(), types.end(), type);
  if (it == types.end()) MT_THROW(section, ".type '", type, "' is not ", noun);
  const size_t i = static_cast<size_t>(it - types.begin());
  if (held.index() != i) held = variant_defaults<Variant>()[i];
}

// Throws unless `held` is the alternative `type` names in `types`: a section's options must be
// selected (its select()) after its type is set, before anything is built from them.
template <typename Variant>
void check_selected(const Variant& held, const std::string& type,
                    const std::vector<std::string>& types, const char* section) {
  const std::string& selected = types[held.index()];
  MT_CHECK(selected == type, section, ".type is '", type, "' but its options are ", selected,
           "'s (the section's select() makes them agree)");
}

// The member named `name` of the options held, if it has one of type T.
template <typename T, typename Options>
auto* option_member(Options& options, const char* name) {
  using Ptr = std::conditional_t<std::is_const_v<Options>, const T*, T*>;
  Ptr found = nullptr;
  std::visit(
      [&](auto& opts) {
        std::decay_t<decltype(opts)>::each(opts, [&](const char* n, auto& member) {
          if constexpr (std::is_same_v<std::decay_t<decltype(member)>, T>) {
            if (std::string_view(n) == name) found = &member;
          }
        });
      },
      options);
  return found;
}

// One key of type T: bound to the held options' member, or (for the types that lack it) to a
// stand-in with the first type's default; applies to the types whose options have it, with their
// defaults where they differ from the first's.
template <typename T, typename V, typename Variant>
void variant_key(V& v, Variant& held, const std::vector<std::string>& types,
                 const VariantKey& row) {
  std::vector<std::string> takers;
  std::vector<T> defaults;
  for (size_t i = 0; i < types.size(); ++i) {
    const T* d = option_member<T>(variant_defaults<Variant>()[i], row.name);
    if (d != nullptr && row_takes(row, types[i])) {
      takers.push_back(types[i]);
      defaults.push_back(*d);
    }
  }
  T stand_in = defaults.front();
  // The held options' field, when the row takes it from their type (a row for another type that
  // shares the field's name binds the stand-in).
  T* member = row_takes(row, types[held.index()]) ? option_member<T>(held, row.name) : nullptr;
  Key<T> k(row.name, member != nullptr ? *member : stand_in);
  k.doc(row.help);
  k.in(row.range);
  if (row.min_int != std::numeric_limits<int64_t>::min()) k.at_least(row.min_int);
  if (row.max_int != std::numeric_limits<int64_t>::max()) k.between(row.min_int, row.max_int);
  if constexpr (NamedEnum<T>) k.one_of(option_names(T{}));
  if (!row.choices.empty()) k.one_of(row.choices);
  if (row.optional) k.optional_output();
  if (row.default_text != nullptr) k.default_text(row.default_text);
  if (row.required) k.required();
  if constexpr (std::is_same_v<T, double>) {
    if (row.nonzero)
      k.checked([](const double& x) { return x != 0.0 ? "" : "cannot be 0"; }, "!= 0");
  }
  if (row.default_from != nullptr) {
    const T* from = option_member<T>(held, row.default_from);
    k.default_from([from, stand_in] { return from != nullptr ? *from : stand_in; },
                   std::string("`") + row.default_from + "`");
  }
  if (takers.size() < types.size()) k.applies_to(takers);
  std::vector<bool> grouped(takers.size(), false);
  for (size_t i = 1; i < takers.size(); ++i) {
    if (grouped[i] || defaults[i] == defaults.front()) continue;
    std::vector<std::string> same{takers[i]};
    for (size_t j = i + 1; j < takers.size(); ++j) {
      if (!grouped[j] && defaults[j] == defaults[i]) {
        same.push_back(takers[j]);
        grouped[j] = true;
      }
    }
    k.default_for(same, defaults[i]);
  }
  v.field(k);
}

// Every row of `rows`, each bound as variant_key does; `after(row)` runs after each row (for the
// rules that check it against the keys before it).
template <typename V, typename Variant, typename After>
void variant_keys(V& v, Variant& held, const std::vector<std::string>& types,
                  const std::vector<VariantKey>& rows, After&& after) {
  for (const VariantKey& row : rows) {
    // The key's type is its member's in the first options struct the row takes it from.
    bool done = false;
    for (size_t i = 0; i < types.size() && !done; ++i) {
      if (!row_takes(row, types[i])) continue;
      std::visit(
          [&](const auto& opts) {
            std::decay_t<decltype(opts)>::each(opts, [&](const char* n, const auto& member) {
              if (done || std::string_view(n) != row.name) return;
              done = true;
              variant_key<std::decay_t<decltype(member)>>(v, held, types, row);
            });
          },
          variant_defaults<Variant>()[i]);
    }
    MT_CHECK(done, "config schema: no options struct takes the key '", row.name, "'");
    after(row);
  }
}

}  // namespace mantissa::runner::schema
