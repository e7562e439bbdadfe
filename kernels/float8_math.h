// Per-element math of the float8 casts of FP8 training (engine/kernel_tables.h: amax_to_scale,
// float8_cast), written once for the CPU kernels (kernels/cpu/copy_kernels.cpp) and the CUDA ones
// (kernels/cuda/copy_kernels.cu). The formulas are torchao's (torchao/float8/float8_utils.py):
// scale = fp8_max / max(amax, 1e-12) in float64, rounded to float32, optionally rounded down to a
// power of two; cast = saturate(float32(x) * scale) to the format's finite range.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/float8.h"
#include "engine/macros.h"

namespace mantissa::float8_math {

// torchao's EPS: an all-zero tensor gets the scale of amax 1e-12 instead of infinity.
inline constexpr double kMinAmax = 1e-12;

// The scale that maps amax onto the format's largest finite value. A NaN amax stays NaN (as
// torch.clamp keeps it); an infinite one gives 0. With power_of_2, floor(log2(scale)) is taken of
// the float32 log2 (as torch.log2 computes it, correctly rounded here from double), so a scale
// just below a power of two whose float32 log2 rounds up becomes that power, as in torchao.
MT_HOST_DEVICE inline float amax_to_scale(double amax, double fp8_max, bool power_of_2) {
  const double clamped = amax < kMinAmax ? kMinAmax : amax;  // NaN fails the test and stays
  float scale = static_cast<float>(fp8_max / clamped);
  if (power_of_2) {
    const float log2_scale = static_cast<float>(MT_MATH(log2)(static_cast<double>(scale)));
    scale = MT_MATH(exp2)(MT_MATH(floor)(log2_scale));
  }
  return scale;
}

// float32(x) * scale, clamped to [-max, max] (NaN passes), in the float8 format F.
// Written on the codes, without a branch, so that a loop of casts vectorises: float8_e4m3fn's
// conversion saturates by itself (every |v| from 448 up, infinity included, gives 448), and
// float8_e5m2's infinity (code 0x7c, from 61440 up) becomes its largest finite value (0x7b).
template <typename F>
MT_HOST_DEVICE inline F saturated_cast(float x, float scale) {
  const F f(x * scale);
  if constexpr (std::is_same_v<F, Float8E5M2>) {
    const bool inf = (f.x & 0x7fu) == 0x7cu;
    return F(static_cast<uint8_t>(inf ? f.x - 1u : f.x), FromBits{});
  }
  return f;
}

}  // namespace mantissa::float8_math
