// Half (IEEE binary16) and BFloat16 value types, usable on host and device.
//
// Both are storage types: arithmetic happens in float (see OpMath in dispatch.h) and results are
// rounded once on store. Conversions are bit-exact round-to-nearest-even, handle NaN (quieted,
// sign kept), ±Inf and subnormals, and do not depend on the host's floating-point environment
// beyond IEEE round-to-nearest (no flush-to-zero). The CPU cast kernels use F16C when present.
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>

#include "engine/macros.h"

namespace mantissa {
namespace detail {

MT_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}
MT_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

// binary16 -> binary32. Exact for every input.
MT_HOST_DEVICE inline float fp32_from_fp16_bits(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  uint32_t o = static_cast<uint32_t>(h & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {  // Inf / NaN: exponent to 255
    o += (128u - 16u) << 23;
  } else if (exp == 0) {  // zero / subnormal: renormalise through a float subtraction (exact)
    o += 1u << 23;
    o = float_bits(bits_float(o) - bits_float(113u << 23));
  }
  o |= static_cast<uint32_t>(h & 0x8000u) << 16;
  return bits_float(o);
}

// binary32 -> binary16, round to nearest even; overflow goes to ±Inf, NaN to a quiet NaN.
MT_HOST_DEVICE inline uint16_t fp16_bits_from_fp32(float value) {
  uint32_t f = float_bits(value);
  const uint32_t sign = f & 0x80000000u;
  f ^= sign;
  uint16_t o;
  if (f >= ((127u + 16u) << 23)) {  // |x| >= 65536: Inf or NaN
    o = f > (255u << 23) ? 0x7e00 : 0x7c00;
  } else if (f < (113u << 23)) {  // result is subnormal or zero
    // Adding 0.5 aligns the 10 result bits at the bottom of the float; the FPU rounds (RNE).
    const float denorm_magic = bits_float(((127u - 15u) + (23u - 10u) + 1u) << 23);
    o = static_cast<uint16_t>(float_bits(bits_float(f) + denorm_magic) - float_bits(denorm_magic));
  } else {
    const uint32_t mant_odd = (f >> 13) & 1u;
    f += (static_cast<uint32_t>(15 - 127) << 23) + 0xfffu + mant_odd;
    o = static_cast<uint16_t>(f >> 13);
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

MT_HOST_DEVICE inline float fp32_from_bf16_bits(uint16_t b) {
  return bits_float(static_cast<uint32_t>(b) << 16);
}

MT_HOST_DEVICE inline uint16_t bf16_bits_from_fp32(float value) {
  const uint32_t u = float_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}

}  // namespace detail

struct FromBits {};
inline constexpr FromBits from_bits{};

struct alignas(2) Half {
  uint16_t x;
  Half() = default;
  constexpr MT_HOST_DEVICE Half(uint16_t bits, FromBits) : x(bits) {}
  MT_HOST_DEVICE Half(float f) : x(detail::fp16_bits_from_fp32(f)) {}
  MT_HOST_DEVICE Half(double d) : Half(static_cast<float>(d)) {}
  MT_HOST_DEVICE operator float() const { return detail::fp32_from_fp16_bits(x); }
};

struct alignas(2) BFloat16 {
  uint16_t x;
  BFloat16() = default;
  constexpr MT_HOST_DEVICE BFloat16(uint16_t bits, FromBits) : x(bits) {}
  MT_HOST_DEVICE BFloat16(float f) : x(detail::bf16_bits_from_fp32(f)) {}
  MT_HOST_DEVICE BFloat16(double d) : BFloat16(static_cast<float>(d)) {}
  MT_HOST_DEVICE operator float() const { return detail::fp32_from_bf16_bits(x); }
};

std::ostream& operator<<(std::ostream& os, Half h);
std::ostream& operator<<(std::ostream& os, BFloat16 b);

// Rounds a float to the precision of T and back: the numerical effect of storing in T.
MT_HOST_DEVICE inline float round_to_half(float f) { return float(Half(f)); }
MT_HOST_DEVICE inline float round_to_bfloat16(float f) { return float(BFloat16(f)); }
// TF32 keeps float32's exponent and 10 mantissa bits; round to nearest even, NaN/Inf unchanged.
MT_HOST_DEVICE inline float round_to_tf32(float f) {
  uint32_t u = detail::float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u += 0xfffu + ((u >> 13) & 1u);
  return detail::bits_float(u & 0xffffe000u);
}

}  // namespace mantissa
