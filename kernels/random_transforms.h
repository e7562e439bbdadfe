// Turning Philox output into distribution samples, shared by the CPU and CUDA random kernels so
// both devices produce the same values for the same (seed, offset). Element i of a call draws
// r = philox4x32(seed, offset + i) and maps it with one of these.
//
// The arithmetic is done in double and rounded once to the output type: that makes the
// results identical across devices and lets uniform's upper bound be enforced after rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/dispatch.h"
#include "engine/philox.h"

namespace mantissa::random {

// Converts a double sample to the output element type.
template <typename T>
MT_HOST_DEVICE inline T to_element(double v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(v));
  } else {
    return static_cast<T>(v);
  }
}

// The uniform [0, 1) variate for floating type T: 24 bits for float and the half types (all
// float can hold), 53 bits for double.
template <typename T>
MT_HOST_DEVICE inline double uniform01(const Philox4& r) {
  if constexpr (std::is_same_v<T, double>) {
    return philox_uniform01_double(r.v[0], r.v[1]);
  } else {
    return static_cast<double>(philox_uniform01(r.v[0]));
  }
}

// The largest value of floating type T strictly below `high` (computed once per call on the
// host). Rounding low + (high - low) * u to T can land on high; such samples are replaced by it.
template <typename T>
inline T largest_below(double high) {
  T h = to_element<T>(high);
  if (static_cast<double>(static_cast<opmath_t<T>>(h)) < high) return h;
  if constexpr (std::is_same_v<T, double>) {
    return std::nextafter(h, -INFINITY);
  } else if constexpr (std::is_same_v<T, float>) {
    return std::nextafterf(h, -INFINITY);
  } else {
    // Half and BFloat16 are sign-magnitude: step the bit pattern one unit towards -inf.
    if ((h.x & 0x7fffu) == 0) return T(static_cast<uint16_t>(0x8001u), from_bits);
    return T(static_cast<uint16_t>((h.x & 0x8000u) ? h.x + 1 : h.x - 1), from_bits);
  }
}

template <typename T>
MT_HOST_DEVICE inline T uniform_sample(const Philox4& r, double low, double high, T below_high) {
  const double v = low + (high - low) * uniform01<T>(r);
  const T t = to_element<T>(v);
  if (low < high && static_cast<double>(static_cast<opmath_t<T>>(t)) >= high) return below_high;
  return t;
}

template <typename T>
MT_HOST_DEVICE inline T normal_sample(const Philox4& r, double mean, double stddev) {
  return to_element<T>(mean + stddev * philox_normal(r));
}

// 1 with probability p, given as bound = philox_bits53_bound(p) (once per call): the 53-bit
// uniform keeps p's resolution for any output type, compared as integers.
template <typename T>
MT_HOST_DEVICE inline T bernoulli_sample(const Philox4& r, uint64_t bound) {
  const bool one = philox_bits53(r.v[0], r.v[1]) < bound;
  if constexpr (std::is_same_v<T, bool>) {
    return one;
  } else {
    return to_element<T>(one ? 1.0 : 0.0);
  }
}

// Uniform integer in [low, high) from 64 random bits (modulo bias is below 2^-32 for ranges
// under 2^32). Unsigned arithmetic keeps ranges wider than INT64_MAX well defined.
template <typename T>
MT_HOST_DEVICE inline T randint_sample(const Philox4& r, int64_t low, uint64_t range) {
  const uint64_t bits = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
  const int64_t v = static_cast<int64_t>(static_cast<uint64_t>(low) + bits % range);
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(v);
  } else {
    return to_element<T>(static_cast<double>(v));
  }
}

}  // namespace mantissa::random
