// Gradient clipping, following torch.nn.utils.clip_grad_norm_ / clip_grad_value_. Both act on
// the .grad of each parameter that has one, in place, and skip the others.
#pragma once

#include <vector>

#include "engine/tensor.h"

namespace mantissa::nn {

// Scales the gradients so that their total norm (the norm_type-norm of the per-gradient
// norms; norm_type = inf gives the largest |g|) is at most max_norm: every gradient is
// multiplied by max_norm / (total_norm + 1e-6) when that is below 1. Returns the total norm
// before clipping (0 when no parameter has a gradient). A non-finite total norm throws when
// error_if_nonfinite, and otherwise scales the gradients by the non-finite coefficient, as
// PyTorch does. Reads one number back from the device.
double clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// clip_grad_norm_ (norm_type 2) with nothing read back to the host, for CUDA graphs: the total
// norm stays a 0-d tensor on the first gradient's device, the coefficient is computed there with
// the same operations in the same dtype, and every gradient is multiplied by it (by exactly 1
// when the norm is under max_norm), so the gradients come out as clip_grad_norm_'s. Returns the
// norm (undefined when no parameter has a gradient).
Tensor clip_grad_norm_on_device_(const std::vector<Tensor>& parameters, double max_norm);

// The coefficient clip_grad_norm_ scales by, computed as PyTorch does in the total norm's dtype
// (float64, else float32): min(max_norm / (total + 1e-6), 1), NaN kept.
double clip_coefficient(double total, double max_norm, DType dtype);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

}  // namespace mantissa::nn
