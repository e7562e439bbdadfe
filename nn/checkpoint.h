// Activation checkpointing, as torch.utils.checkpoint.checkpoint(fn, *inputs,
// use_reentrant=False): fn runs as usual but keeps none of the tensors its ops save for
// backward; the first time backward needs one of them, fn runs again on the same inputs and
// gives them back. The recomputation sees the random state (dropout) and the autocast state
// that the forward saw, so it is the same computation and the gradients are bitwise those of
// the same step without checkpointing. Memory: the inputs and outputs of fn are kept, the
// tensors saved inside it only while backward passes through it.
//
// Selective checkpointing (CheckpointOptions::save_ops, as PyTorch's
// create_selective_checkpoint_contexts with CheckpointPolicy.MUST_SAVE): the kernel outputs of the
// named ops are kept from the forward and the recomputation takes them instead of running those
// kernels again; the gradients are the same bits. For attention, that is its output and
// log-sum-exp per query (far less than the q, k, v it saves for backward, which are recomputed),
// and the recomputation skips the attention kernel, the most expensive op of a transformer block
// per byte kept.
//
// fn must do the same ops when run again (the same tensors saved in the same order; a
// different count is an error naming both). Backward with create_graph is refused. The graph
// is otherwise the usual one: gradients reach the parameters fn uses and the inputs that
// require grad, under DDP's hooks and gradient accumulation alike.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::nn {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)>;

struct CheckpointOptions {
  // Ops whose kernel outputs are kept rather than recomputed; each one of
  // autograd::keepable_kernel_ops() ("scaled_dot_product_attention"). Empty: recompute all.
  std::vector<std::string> save_ops;
};

// Throws for a save_ops name that is not an op whose outputs can be kept.
void check_checkpoint_options(const CheckpointOptions& options);

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options = {});
// One input and one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointOptions& options = {});

}  // namespace mantissa::nn
