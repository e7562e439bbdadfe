// Running the tape backwards.
#pragma once

#include <functional>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::autograd {

// Backpropagates from `outputs` (seeded with `grad_outputs`, ones for scalars when undefined)
// and accumulates into the .grad of every leaf that requires grad.
//
// create_graph records the pass itself, as PyTorch does: the gradients (and .grad built by it)
// have a history and can be differentiated again, for gradient penalties or Hessian-vector
// products. It implies retain_graph. Every node the pass runs must support it
// (Node::supports_create_graph; docs/api.md lists the ops); one that does not makes the call
// throw, naming the node.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// Tensor::backward: backward() from one output, without building vectors (an undefined
// grad_output means ones for a scalar).
void backward_from(const Tensor& output, const Tensor& grad_output, bool retain_graph,
                   bool create_graph = false);

// Gradients of `outputs` w.r.t. `inputs`, returned instead of accumulated into .grad.
// An input the outputs do not depend on gets an undefined tensor if allow_unused, else an error.
// create_graph as for backward(). It comes after allow_unused (PyTorch's order is the reverse)
// so that existing calls passing allow_unused keep their meaning.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool allow_unused = false, bool create_graph = false);

// Queues `callback` to run when the backward pass running on this thread has finished (PyTorch's
// Variable._execution_engine.queue_callback): after every node, in the order queued, before
// backward()/grad() return. A callback may queue more. Callbacks of a pass that throws do not
// run. Calling it outside a backward pass (from a hook or node) throws.
void queue_callback(std::function<void()> callback);
// Whether a backward pass is running on this thread.
bool in_backward();

}  // namespace mantissa::autograd
