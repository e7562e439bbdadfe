// Per-element math of the scaled matrix product's epilogue (scaled_mm, engine/kernel_tables.h),
// written once for the CPU kernel (kernels/cpu/matmul_kernels.cpp) and the CUDA one
// (kernels/cuda/matmul_kernels.cu): the float32 sum of products times the two dequantization
// scales, plus the bias, rounded once to the output dtype.
#pragma once

#include "engine/macros.h"

namespace mantissa::scaled_mm_math {

// The two scales multiply first, as torchao's post-GEMM scaling does (a_scale * b_scale, then
// the product); a missing bias adds nothing (so -0.0 stays -0.0, as PyTorch's product without
// a bias).
template <typename T>
MT_HOST_DEVICE inline T element(float acc, float scale_a, float scale_b, const float* bias,
                                int64_t col) {
  float v = acc * (scale_a * scale_b);
  if (bias != nullptr) v += bias[col];
  return static_cast<T>(v);
}

}  // namespace mantissa::scaled_mm_math
