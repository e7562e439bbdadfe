// Value conversion between storage types, shared by the CPU and CUDA kernels and by Scalar, so
// that a cast gives the same bits on every device: through opmath, half types via float, != 0 for
// bool, and floating point to integer defined for every input (float_to_integer).
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/macros.h"
#include "engine/opmath.h"

namespace mantissa {

// C++ leaves a float -> integer conversion undefined when the truncated value does not fit, and
// devices disagree on it: x86 gives 255 for uint8(-1.5) and INT_MIN for out-of-range values,
// while the GPU's cvt.rzi clamps and turns NaN into 0. As PyTorch does for uint8, every integer
// type is reached through int64 and then wrapped modulo 2^bits, which is defined for any value;
// the only choices left are the ones int64 itself needs: NaN gives 0, and values past its range
// saturate (so +inf gives INT64_MAX, -inf INT64_MIN).
template <typename To, typename F>
MT_HOST_DEVICE inline To float_to_integer(F v) {
  static_assert(std::is_floating_point_v<F> && std::is_integral_v<To>);
  constexpr F kTwoPow63 = F(9223372036854775808.0);  // exact in float and double
  int64_t i = 0;
  if (v != v) {
    i = 0;
  } else if (v >= kTwoPow63) {
    i = INT64_MAX;
  } else if (v < -kTwoPow63) {
    i = INT64_MIN;
  } else {
    i = static_cast<int64_t>(v);
  }
  return static_cast<To>(i);  // modular since C++20
}

template <typename To, typename From>
MT_HOST_DEVICE inline To convert(From v) {
  using Op = opmath_t<From>;
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<Op>(v) != Op(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16> ||
                       std::is_same_v<To, Float8E4M3FN> || std::is_same_v<To, Float8E5M2>) {
    // Through float, as PyTorch: a double or an integer is rounded to float first.
    return To(static_cast<float>(static_cast<Op>(v)));
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<Op>) {
    return float_to_integer<To>(static_cast<Op>(v));
  } else {
    return static_cast<To>(static_cast<Op>(v));
  }
}

}  // namespace mantissa
