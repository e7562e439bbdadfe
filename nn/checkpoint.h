// Activation checkpointing, as torch.utils.checkpoint.checkpoint(fn, *inputs,
// use_reentrant=False): fn runs as usual but keeps none of the tensors its ops save for
// backward; the first time backward needs one of them, fn runs again on the same inputs and
// gives them back. The recomputation sees the random state (dropout) and the autocast state
// that the forward saw, so it is the same computation and the gradients are bitwise those of
// the same step without checkpointing. Memory: the inputs and outputs of fn are kept, the
// tensors saved inside it only while backward passes through it.
//
// fn must do the same ops when run again (the same tensors saved in the same order; a
// different count is an error naming both). Backward with create_graph is refused. The graph
// is otherwise the usual one: gradients reach the parameters fn uses and the inputs that
// require grad, under DDP's hooks and gradient accumulation alike.
#pragma once

#include <functional>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::nn {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);
// One input and one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

}  // namespace mantissa::nn
