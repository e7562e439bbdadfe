// An optimizer's options named once. Each options struct lists its fields in a static `each`
// (name and member, in declaration order), and that list alone gives
//   - the group options map that param_groups() and state_dict() hold, in PyTorch's names and
//     form (a pair `betas` is beta1/beta2, a bool is 0/1): option_map(options);
//   - the typed options of a group (nn/optim/optimizer.h), for validation, the step and users:
//     ParamGroup(params, options), group.options_as<O>(), group.set_options(options), all
//     through option_values<O>();
//   - the runner's config keys (runner/config_schema.h walks the same list).
//
//   struct RAdamOptions {
//     double lr = 1e-3;
//     std::pair<double, double> betas{0.9, 0.999};
//     template <typename Self, typename V>
//     static void each(Self& o, V&& v) { v("lr", o.lr); v("betas", o.betas); }
//   };
//
// A field is double, bool or std::pair<double, double> (named with a plural "s", as betas).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/error.h"

namespace mantissa::optim {

namespace detail {

// beta1 / beta2 for `betas`.
inline std::string pair_key(std::string_view name, int index) {
  std::string key(name.substr(0, name.size() - (name.ends_with('s') ? 1 : 0)));
  return key + (index == 0 ? "1" : "2");
}

}  // namespace detail

// The group options' names of O, in `each` order (a pair gives two), made once per type.
template <typename O>
const std::vector<std::string>& option_keys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    const O defaults{};
    O::each(defaults, [&k](const char* name, const auto& value) {
      if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::pair<double, double>>) {
        k.push_back(detail::pair_key(name, 0));
        k.push_back(detail::pair_key(name, 1));
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
    } else if constexpr (std::is_same_v<T, bool>) {
      m[keys[i++]] = value ? 1.0 : 0.0;
    } else {
      static_assert(std::is_same_v<T, double>, "an option is double, bool or a pair of doubles");
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
    } else if constexpr (std::is_same_v<T, bool>) {
      value = values[i++] != 0.0;
    } else {
      value = values[i++];
    }
  });
  return o;
}

}  // namespace mantissa::optim
