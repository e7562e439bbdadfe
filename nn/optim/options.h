// An optimizer's options named once. Each options struct lists its fields in a static `each`
// (name and member, in declaration order), and that list alone gives
//   - the group options map that param_groups() and state_dict() hold, in PyTorch's names and
//     form (a pair `betas` is beta1/beta2, a bool is 0/1): option_map(options);
//   - the typed options of a group (nn/optim/optimizer.h), for validation, the step and users:
//     ParamGroup(params, options), group.options_as<O>(), group.set_options(options), all
//     through option_values<O>();
//   - the runner's config keys (runner/config/config_schema.h walks the same list).
//
//   struct RAdamOptions {
//     double lr = 1e-3;
//     std::pair<double, double> betas{0.9, 0.999};
//     template <typename Self, typename V>
//     static void each(Self& o, V&& v) { v("lr", o.lr); v("betas", o.betas); }
//   };
//
// A field is double, int64_t (a double in the group map, which the optimizer checks is whole),
// bool, an enum (its underlying value in the group map; an `option_names(E)` found by ADL names
// its values 0, 1, ... for the config), std::pair<double, double> (named with a plural "s", as
// betas: beta1, beta2) or std::array<double, 3> (named likewise: Muon's ns_coefficients are
// ns_coefficient1..3).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/error.h"

namespace mantissa::optim {

namespace detail {

// beta1 / beta2 for `betas` (index 0, 1, ...).
inline std::string pair_key(std::string_view name, int index) {
  std::string key(name.substr(0, name.size() - (name.ends_with('s') ? 1 : 0)));
  return key + std::to_string(index + 1);
}

template <typename T>
inline constexpr size_t kTupleSize = 0;  // a scalar option
template <>
inline constexpr size_t kTupleSize<std::pair<double, double>> = 2;
template <>
inline constexpr size_t kTupleSize<std::array<double, 3>> = 3;

}  // namespace detail

// The group options' names of O, in `each` order (a pair gives two), made once per type.
template <typename O>
const std::vector<std::string>& option_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    const O defaults{};
    O::each(defaults, [&k](const char* name, const auto& value) {
      constexpr size_t n = detail::kTupleSize<std::decay_t<decltype(value)>>;
      if constexpr (n > 0) {
        for (size_t j = 0; j < n; ++j) k.push_back(detail::pair_key(name, static_cast<int>(j)));
      } else {
        k.emplace_back(name);
      }
    });
    return k;
  }();
  return keys;
}

// The group form of `options`: one entry per option_keys<O>() name, bools as 0/1.
template <typename O>
std::map<std::string, double> option_map(const O& options) {
  const std::vector<std::string>& keys = option_keys<O>();
  std::map<std::string, double> m;
  size_t i = 0;
  O::each(options, [&](const char*, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::pair<double, double>>) {
      m[keys[i++]] = value.first;
      m[keys[i++]] = value.second;
    } else if constexpr (std::is_same_v<T, std::array<double, 3>>) {
      for (double v : value) m[keys[i++]] = v;
    } else if constexpr (std::is_same_v<T, bool>) {
      m[keys[i++]] = value ? 1.0 : 0.0;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      m[keys[i++]] = static_cast<double>(value);
    } else if constexpr (std::is_enum_v<T>) {
      m[keys[i++]] = static_cast<double>(static_cast<std::underlying_type_t<T>>(value));
    } else {
      static_assert(std::is_same_v<T, double>,
                    "an option is double, int64_t, bool, an enum, a pair or a triple of doubles");
      m[keys[i++]] = value;
    }
  });
  return m;
}

// Whether O is an options struct (lists its fields in `each`).
template <typename O>
concept OptionsStruct = requires(const O& o) {
  O::each(o, [](const char*, const auto&) {});
};

// O from its group form's values, in option_keys<O>() order.
template <typename O>
O option_values(const double* values) {
  O o;
  size_t i = 0;
  O::each(o, [&](const char*, auto& value) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::pair<double, double>>) {
      value = {values[i], values[i + 1]};
      i += 2;
    } else if constexpr (std::is_same_v<T, std::array<double, 3>>) {
      value = {values[i], values[i + 1], values[i + 2]};
      i += 3;
    } else if constexpr (std::is_same_v<T, bool>) {
      value = values[i++] != 0.0;
    } else if constexpr (std::is_same_v<T, int64_t>) {
      // The optimizer checks the group's value (whole, in range); one no int64_t holds reads as
      // the smallest, never as undefined behaviour.
      const double v = values[i++];
      value =
          v > -9.2e18 && v < 9.2e18 ? static_cast<int64_t>(v) : std::numeric_limits<int64_t>::min();
    } else if constexpr (std::is_enum_v<T>) {
      // Likewise: a value outside the underlying type reads as its largest.
      using U = std::underlying_type_t<T>;
      const double v = values[i++];
      value = static_cast<T>(v >= static_cast<double>(std::numeric_limits<U>::min()) &&
                                     v <= static_cast<double>(std::numeric_limits<U>::max())
                                 ? static_cast<U>(v)
                                 : std::numeric_limits<U>::max());
    } else {
      value = values[i++];
    }
  });
  return o;
}

}  // namespace mantissa::optim
