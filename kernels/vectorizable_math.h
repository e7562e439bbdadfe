// float32 exp and the standard normal CDF written branch-free (bitwise selects, no calls), so that
// a CPU loop over them vectorises: std::exp and std::erf on a float are libm calls, one lane at a
// time, and they dominate the loops of attention's softmax and of GELU. Host code; the CUDA
// kernels use the device math library.
//
// Accuracy (tests/test_elementwise.cpp sweeps both against double-precision references):
//  - exp_f32: within 2 ulp of exp over the normal range; results below FLT_MIN are denormals
//    computed by two exact power-of-two scalings; exp(x) = 0 for x <= -104 (the true value is
//    below half the smallest denormal), +inf above log(FLT_MAX), NaN for NaN.
//  - normal_pdf_f32: exp_f32's accuracy on -x^2 / 2, times 1 / sqrt(2 pi) rounded.
//  - normal_cdf_f32: relative error below 1e-5 where Phi(x) >= 1e-30 (x >= -11.4) and below 2e-6
//    where Phi(x) >= 1e-8 (x >= -5.6), from erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z/2), with
//    P a degree-9 polynomial fitted to within 5e-8 of log(erfc(z) / t) + z^2 on z in [0, 10]
//    (scripts/fit_erfc.py). Most of the error is the rounding of z^2 in float, about
//    z^2 * 6e-8 relative. Phi(-inf) = 0, Phi(+inf) = 1, NaN for NaN.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "engine/macros.h"

namespace mantissa::vmath {

// c ? a : b for float or double, as bit operations. With -ftrapping-math (GCC's default) a ?:
// whose arm computes something is a branch, and a branch keeps GCC from vectorising the loop.
template <typename T>
MT_FORCE_INLINE T select(bool c, T a, T b) {
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const Bits mask = Bits(0) - Bits(c);
  return std::bit_cast<T>((std::bit_cast<Bits>(a) & mask) | (std::bit_cast<Bits>(b) & ~mask));
}

// exp(x) for finite x in [-174, 88.72]: exp_f32's bits there, without its special cases, for
// callers whose argument is in range by construction (a select costs as much as a step of the
// polynomial). Results below FLT_MIN are denormals, rounded once.
MT_FORCE_INLINE float exp_f32_finite(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  constexpr float kLn2Hi = 0.693359375f;  // 9 significant bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float nf = (x * kLog2e + kRound) - kRound;
  const float r = (x - nf * kLn2Hi) - nf * kLn2Lo;  // |r| <= ln(2) / 2
  // exp(r) by its Taylor series to r^7 (the next term is below 8e-9 relative on |r| <= 0.347).
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n in two halves, each a normal float for n in [-252, 128]: p * s1 is exact, and the
  // second product rounds once (to 0 below half the smallest denormal).
  const int32_t n = static_cast<int32_t>(nf);
  const int32_t n1 = n / 2, n2 = n - n1;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n2 + 127) << 23);
  return p * s1 * s2;
}

MT_FORCE_INLINE float exp_f32(float x) {
  constexpr float kLow = -104.0f, kHigh = 88.72283935546875f;
  // x <= kLow (-inf included: softmax's masked scores) and NaN compute exp(0) here and are
  // replaced at the end: no NaN reaches the int conversion, and no lane scales into a denormal it
  // does not return (each such multiply costs a microcode assist of ~100 cycles on x86).
  const float xc = select(x > kLow, select(x < kHigh, x, kHigh), 0.0f);
  const float y = select(x >= kHigh, std::numeric_limits<float>::infinity(), exp_f32_finite(xc));
  return select(x != x, x, select(x <= kLow, 0.0f, y));
}

// Phi(x) = P(N(0, 1) <= x) = erfc(-x / sqrt(2)) / 2, from erfc of z = |x| / sqrt(2) >= 0 without
// cancellation on either side: Phi = erfc(z) / 2 for x < 0, 1 - erfc(z) / 2 for x >= 0.
MT_FORCE_INLINE float normal_cdf_f32(float x) {
  const float a = std::fabs(x);
  const float ac =
      select(a < 16.0f, a, 16.0f);  // erfc(16 / sqrt(2)) / 2 = 6e-58: 0 in float; NaN too
  const float z = ac * 0.70710678118654752f;
  const float t = 1.0f / (1.0f + 0.5f * z);
  const float u = (t - 0.583333333f) * 2.4f;  // t in [1/6, 1] (z <= 10) mapped onto [-1, 1]
  float p = 5.3825388e-05f;
  p = p * u + 7.30921092e-05f;
  p = p * u + -0.00053203135f;
  p = p * u + -0.000226686636f;
  p = p * u + 0.00370579865f;
  p = p * u + -0.0010629599f;
  p = p * u + -0.0294698849f;
  p = p * u + 0.0157472175f;
  p = p * u + 0.570307076f;
  p = p * u + -0.558595419f;
  // The argument is in [-130, 0.1]: no special cases to handle.
  const float half_erfc = 0.5f * t * exp_f32_finite(p - 0.5f * ac * ac);
  return select(x != x, x, select(x < 0.0f, half_erfc, 1.0f - half_erfc));
}

// exp(-x^2 / 2) / sqrt(2 pi), the standard normal density; 0 from |x| = 16 on (where the float
// result is 0), NaN for NaN.
MT_FORCE_INLINE float normal_pdf_f32(float x) {
  const float a = std::fabs(x);
  const float ac = select(a < 16.0f, a, 16.0f);
  return 0.3989422804014327f * select(x != x, x, exp_f32_finite(-0.5f * ac * ac));
}

}  // namespace mantissa::vmath
