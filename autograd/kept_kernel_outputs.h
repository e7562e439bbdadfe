// Selective activation checkpointing (PyTorch's create_selective_checkpoint_contexts with
// CheckpointPolicy.MUST_SAVE): inside nn::checkpoint, the ops its options name keep their
// kernel's outputs from the forward, and the recomputation in backward takes them back instead
// of running the kernel again. What the op records is the same either way (the same node, the
// same saved tensors, the same random-number draws), so the gradients are the same bits; the
// kept outputs cost memory until backward has passed, the kernel's time is saved once.
//
// An op takes part by running its kernel through run_keepable_kernel (the ops listed by
// keepable_kernel_ops()); the others are always recomputed.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace mantissa::autograd {

// The ops whose kernels can be kept: names for nn::CheckpointOptions::save_ops.
const std::vector<std::string>& keepable_kernel_ops();

// One checkpointed call's kept outputs, in the order its forward ran the kernels.
class KeptKernelOutputs {
 public:
  explicit KeptKernelOutputs(std::vector<std::string> ops) : ops_(std::move(ops)) {}

  bool keeps(const char* op) const;
  // Forward: the kernel of `op` ran (handled: it computed `outputs`; else it declined the case
  // and computed nothing).
  void keep(const char* op, bool handled, const std::vector<Tensor>& outputs);
  // Recomputation: the outputs `op` kept, in order, copied into `outputs`; whether its kernel had
  // handled the case. Throws when the recomputation runs other kernels than the forward did.
  bool replay(const char* op, const std::vector<Tensor>& outputs);

  // Recomputation starts from the first kept kernel again / must have used them all.
  void start_replay() { next_ = 0; }
  void finish_replay() const;
  // Backward is done with the call: the kept outputs are freed.
  void clear() { entries_.clear(); }
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry {
    const char* op;
    bool handled;
    std::vector<Tensor> outputs;
    std::vector<uint32_t> versions;  // to refuse outputs modified in place since
  };
  std::vector<std::string> ops_;
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

// Installs `kept` on this thread for its scope, recording (the forward) or replaying (the
// recomputation); scopes nest (a checkpoint inside a checkpointed function).
class KeptKernelOutputsGuard {
 public:
  KeptKernelOutputsGuard(KeptKernelOutputs* kept, bool replaying);
  ~KeptKernelOutputsGuard();
  KeptKernelOutputsGuard(const KeptKernelOutputsGuard&) = delete;
  KeptKernelOutputsGuard& operator=(const KeptKernelOutputsGuard&) = delete;

 private:
  KeptKernelOutputs* previous_;
  bool previous_replaying_;
};

// Runs `kernel`, which writes `outputs` and returns false when it declines the case (computing
// nothing), unless a recomputation replays it; keeps the outputs when the installed checkpoint
// names `op`.
bool run_keepable_kernel(const char* op, const std::vector<Tensor>& outputs,
                         const std::function<bool()>& kernel);

}  // namespace mantissa::autograd
