// Running the tape backwards.
#pragma once

#include <vector>

#include "engine/tensor.h"

namespace mantissa::autograd {

// Backpropagates from `outputs` (seeded with `grad_outputs`, ones for scalars when undefined)
// and accumulates into the .grad of every leaf that requires grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false);

// Tensor::backward: backward() from one output, without building vectors (an undefined
// grad_output means ones for a scalar).
void backward_from(const Tensor& output, const Tensor& grad_output, bool retain_graph);

// Gradients of `outputs` w.r.t. `inputs`, returned instead of accumulated into .grad.
// An input the outputs do not depend on gets an undefined tensor if allow_unused, else an error.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false);

}  // namespace mantissa::autograd
