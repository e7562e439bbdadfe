// The two 8-bit floating-point formats of PyTorch and NVIDIA's FP8 tensor cores, as value types
// usable on host and device:
//   Float8E4M3FN  4 exponent bits (bias 7), 3 mantissa bits; no infinity, one NaN per sign
//                 (0x7f, 0xff); largest 448, smallest normal 2^-6, smallest subnormal 2^-9.
//   Float8E5M2    5 exponent bits (bias 15), 2 mantissa bits; IEEE-like, with ±infinity
//                 (0x7c, 0xfc) and NaNs; largest 57344, smallest subnormal 2^-16.
//
// Conversions from float are PyTorch 2.x's `.to(torch.float8_*)`, bit for bit for every one of
// the 2^32 float32 inputs (tests/test_float8.cpp against scripts/golden/make_float8.py): round to
// nearest even; e4m3fn saturates (every finite value from 448 up, and ±infinity, become ±448),
// e5m2 overflows to ±infinity; a NaN becomes the format's NaN 0x7f with the input's sign. A double
// is rounded to float first, as PyTorch does. Conversions to float are exact, a NaN decoding to a
// quiet NaN that keeps the code's sign and mantissa bits (as PyTorch's does).
//
// Every value of both formats is exactly a bfloat16 (and a float16) value: a product of FP8
// operands can run on 16-bit hardware with float accumulation and give what an FP8 tensor core
// gives, up to summation order.
#pragma once

#include <cstdint>
#include <iosfwd>

#include "engine/half.h"

namespace mantissa {
namespace detail {

// |x| (its float32 bits `a`, finite) rounded to nearest even on the grid of an 8-bit format with
// M mantissa bits and exponent bias B: the code exponent << M | mantissa, which may pass the
// format's largest finite code (the caller saturates or overflows).
template <int M, int B>
MT_HOST_DEVICE inline uint32_t fp8_round_magnitude(uint32_t a) {
  // Both roundings are computed and one is selected, without a branch, so that a loop of casts
  // vectorises (a branch here kept the CPU's cast loops scalar).
  constexpr uint32_t min_normal = static_cast<uint32_t>(127 - B + 1) << 23;  // 2^(1 - B)
  // Below the smallest normal the grid step is 2^(1 - B - M). Adding a float whose unit in the
  // last place is that step leaves the rounded multiple in the low bits (the FPU rounds, to
  // nearest even); 2^M multiples round up into the smallest normal's code, which is 2^M.
  const float magic = bits_float(static_cast<uint32_t>(127 + 1 - B - M + 23) << 23);
  const uint32_t subnormal = float_bits(bits_float(a) + magic) - float_bits(magic);
  // Normal: keep M mantissa bits, rounding the 23 - M dropped bits to nearest even, then rebias.
  constexpr int dropped = 23 - M;
  const uint32_t odd = (a >> dropped) & 1u;
  const uint32_t rounded = (a + ((1u << (dropped - 1)) - 1u) + odd) >> dropped;
  const uint32_t normal = rounded - (static_cast<uint32_t>(127 - B) << M);
  return a < min_normal ? subnormal : normal;
}

// The float value of a finite code's magnitude (code = exponent << M | mantissa).
template <int M, int B>
MT_HOST_DEVICE inline uint32_t fp8_magnitude_bits(uint32_t code) {
  const uint32_t exponent = code >> M;
  const uint32_t mantissa = code & ((1u << M) - 1u);
  if (exponent == 0) {  // subnormal or zero: mantissa steps of 2^(1 - B - M), exact in float
    return float_bits(static_cast<float>(mantissa) *
                      bits_float(static_cast<uint32_t>(127 + 1 - B - M) << 23));
  }
  return ((exponent + 127 - B) << 23) | (mantissa << (23 - M));
}

// The quiet NaN a NaN code decodes to: its sign and mantissa bits kept, the quiet bit set.
template <int M>
MT_HOST_DEVICE inline float fp8_nan(uint32_t sign, uint32_t code) {
  return bits_float(sign | 0x7fc00000u | ((code & ((1u << M) - 1u)) << (23 - M)));
}

MT_HOST_DEVICE inline uint8_t fp8e4m3fn_bits_from_fp32(float value) {
  const uint32_t u = float_bits(value);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  uint32_t code = fp8_round_magnitude<3, 7>(a);
  code = a >= 0x43e00000u ? 0x7eu : code;  // >= 448, infinity: 448
  code = a > 0x7f800000u ? 0x7fu : code;   // NaN
  return static_cast<uint8_t>(sign | code);
}

MT_HOST_DEVICE inline float fp32_from_fp8e4m3fn_bits(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t code = b & 0x7fu;
  if (code == 0x7fu) return fp8_nan<3>(sign, code);
  return bits_float(sign | fp8_magnitude_bits<3, 7>(code));
}

MT_HOST_DEVICE inline uint8_t fp8e5m2_bits_from_fp32(float value) {
  const uint32_t u = float_bits(value);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  // Past the largest finite code (57344), rounding gives infinity, as does an infinite input.
  uint32_t code = fp8_round_magnitude<2, 15>(a);
  code = a >= 0x7f800000u || code > 0x7cu ? 0x7cu : code;
  code = a > 0x7f800000u ? 0x7fu : code;  // NaN
  return static_cast<uint8_t>(sign | code);
}

MT_HOST_DEVICE inline float fp32_from_fp8e5m2_bits(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t code = b & 0x7fu;
  if (code == 0x7cu) return bits_float(sign | 0x7f800000u);
  if (code > 0x7cu) return fp8_nan<2>(sign, code);
  return bits_float(sign | fp8_magnitude_bits<2, 15>(code));
}

}  // namespace detail

struct alignas(1) Float8E4M3FN {
  uint8_t x;
  Float8E4M3FN() = default;
  constexpr MT_HOST_DEVICE Float8E4M3FN(uint8_t bits, FromBits) : x(bits) {}
  MT_HOST_DEVICE Float8E4M3FN(float f) : x(detail::fp8e4m3fn_bits_from_fp32(f)) {}
  MT_HOST_DEVICE Float8E4M3FN(double d) : Float8E4M3FN(static_cast<float>(d)) {}
  MT_HOST_DEVICE operator float() const { return detail::fp32_from_fp8e4m3fn_bits(x); }
  static constexpr float kMax = 448.0f;
};

struct alignas(1) Float8E5M2 {
  uint8_t x;
  Float8E5M2() = default;
  constexpr MT_HOST_DEVICE Float8E5M2(uint8_t bits, FromBits) : x(bits) {}
  MT_HOST_DEVICE Float8E5M2(float f) : x(detail::fp8e5m2_bits_from_fp32(f)) {}
  MT_HOST_DEVICE Float8E5M2(double d) : Float8E5M2(static_cast<float>(d)) {}
  MT_HOST_DEVICE operator float() const { return detail::fp32_from_fp8e5m2_bits(x); }
  static constexpr float kMax = 57344.0f;
};

std::ostream& operator<<(std::ostream& os, Float8E4M3FN f);
std::ostream& operator<<(std::ostream& os, Float8E5M2 f);

}  // namespace mantissa
