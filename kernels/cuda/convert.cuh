// Value conversion between storage types on the device, with the CPU copy kernel's semantics
// (kernels/cpu/copy_kernels.cpp): through opmath, half types via float, != 0 for bool.
#pragma once

#include <type_traits>

#include "engine/dispatch.h"

namespace mantissa::cuda {

template <typename To, typename From>
MT_HOST_DEVICE inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<opmath_t<From>>(v) != opmath_t<From>(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(static_cast<opmath_t<From>>(v)));
  } else {
    return static_cast<To>(static_cast<opmath_t<From>>(v));
  }
}

}  // namespace mantissa::cuda
