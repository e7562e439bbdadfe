// The scalar math of the activations a linear layer can fuse (ReLU, exact and tanh GELU) and of
// their derivatives, written once for every kernel that applies them: the elementwise functors
// (kernels/functors.h, run by the CPU loops and the CUDA kernels), the CPU linear kernels' row
// passes and GEMM epilogue, and the composition both devices fall back to. Host and device code
// (MT_HOST_DEVICE); T is the OpMath type (float for half types), so callers round once on store.
//
// A SIMD path that cannot call these per lane (the CPU's AVX-512 passes) implements the same
// comparison, named next to each function below, and is tested against it.
#pragma once

#include <cmath>
#include <type_traits>

#include "engine/activation_formulas.h"
#include "engine/macros.h"
#if !defined(__CUDA_ARCH__)
#include "kernels/vectorizable_math.h"
#endif

namespace mantissa::activation {

// x < 0, without comparing an unsigned value with zero (nvcc warns about that).
template <typename T>
MT_HOST_DEVICE inline bool is_negative(T x) {
  if constexpr (std::is_unsigned_v<T>) {
    return false;
  } else {
    return x < T(0);
  }
}

// relu(x): 0 where x < 0 (an ordered compare), else x. NaN propagates, as in PyTorch (x > 0 is
// false for NaN, so the test is x < 0), and -0 passes unchanged.
template <typename T>
MT_HOST_DEVICE inline T relu(T x) {
  return is_negative(x) ? T(0) : x;
}

// Phi(x), the standard normal CDF. A float on the host takes the branch-free form, so that the
// CPU's GELU loops vectorise; elsewhere erf from the math library.
template <typename T>
MT_HOST_DEVICE MT_FORCE_INLINE T normal_cdf(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return vmath::normal_cdf_f32(x);
#endif
  return T(0.5) * (T(1) + MT_MATH(erf)(x * T(0.7071067811865476)));
}
// exp(-x^2 / 2) / sqrt(2 pi), the standard normal density.
template <typename T>
MT_HOST_DEVICE MT_FORCE_INLINE T normal_pdf(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<T, float>) return vmath::normal_pdf_f32(x);
#endif
  return T(0.3989422804014327) * MT_MATH(exp)(T(-0.5) * x * x);
}

// Exact GELU: x * Phi(x).
template <typename T>
MT_HOST_DEVICE MT_FORCE_INLINE T gelu(T x) {
  return x * normal_cdf(x);
}
template <typename T>
MT_HOST_DEVICE MT_FORCE_INLINE T gelu_derivative(T s) {
  return normal_cdf(s) + s * normal_pdf(s);
}

// gelu(approximate="tanh"), the GELU cuBLASLt's epilogues compute (its inner term and derivative:
// engine/activation_formulas.h).
template <typename T>
MT_HOST_DEVICE inline T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + MT_MATH(tanh)(formulas::gelu_tanh_inner(x)));
}

}  // namespace mantissa::activation
