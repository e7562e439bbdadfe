// The per-row math of cross_entropy_rows (engine/kernel_tables.h), written once for the CPU loop
// (kernels/cpu/cross_entropy_kernels.cpp) and the CUDA block-per-row kernel
// (kernels/cuda/cross_entropy_kernels.cu). Each device finds a row's max, sum(exp(z - max)),
// sum(z) and z[target] its own way; what they mean is here. A is the opmath type (float for the
// half types and float32, double for float64).
#pragma once

#include <cstdint>

#include "engine/macros.h"

namespace mantissa::cross_entropy {

// What a row's target makes of it.
enum class RowTarget : uint8_t { Counted, Ignored, OutOfRange };

MT_HOST_DEVICE inline RowTarget classify(int64_t target, int64_t classes, int64_t ignore_index) {
  if (target == ignore_index) return RowTarget::Ignored;
  return target >= 0 && target < classes ? RowTarget::Counted : RowTarget::OutOfRange;
}

// The loss of a counted row from lse = max + log(sum(exp(z - max))): (1 - s)(lse - z[t]) +
// s (lse - sum(z) / V). sum(z) is not read without smoothing (it may be inf where the loss is not).
template <typename A>
MT_HOST_DEVICE inline A row_loss(A lse, A z_target, A sum_z, A smoothing, A classes) {
  if (smoothing == A(0)) return lse - z_target;
  return (A(1) - smoothing) * (lse - z_target) + smoothing * (lse - sum_z / classes);
}

// The gradient of one element given its probability p = exp(z - lse), times the row's scale.
template <typename A>
MT_HOST_DEVICE inline A element_grad(A p, bool is_target, A smoothing, A classes, A scale) {
  const A target_part = is_target ? A(1) - smoothing : A(0);
  return scale * (p - smoothing / classes - target_part);
}

}  // namespace mantissa::cross_entropy
