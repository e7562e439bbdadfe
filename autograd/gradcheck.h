// gradcheck: compares autograd's gradients with central finite differences, in float64.
#pragma once

#include <functional>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::autograd {

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// For every float64 input that requires grad and every element of fn's output, checks
// |analytic - numeric| <= atol + rtol * |numeric|. Inputs may be non-contiguous views.
// Returns true on success; throws mantissa::Error naming the input, the output element and
// both values on the first mismatch (or when inputs are not float64 / nothing requires grad).
bool gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
               double atol = 1e-5, double rtol = 1e-3);

// Second-order check (PyTorch's gradgradcheck): with fixed grad_outputs v, gradchecks the map
// (inputs, v) -> grad(fn(inputs), inputs, v, create_graph=true), so that the double backward
// of every op fn uses is compared with finite differences of its first gradient. First it
// gradchecks fn and checks that the first gradient is the same with and without create_graph
// (formulas may compute it differently in the two). Throws as gradcheck does, or the
// create_graph error of an op that does not support it.
bool gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs, double eps = 1e-6,
                   double atol = 1e-5, double rtol = 1e-3);

}  // namespace mantissa::autograd
