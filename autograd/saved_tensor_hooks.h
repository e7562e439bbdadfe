// Saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks): while a pack hook is installed on
// a thread, every tensor an op saves for backward there is handed to it, and the handle it
// returns is stored in the tensor's place; backward asks the handle for the tensor. Activation
// checkpointing (nn/checkpoint.h) packs saved tensors into nothing and recomputes them.
#pragma once

#include <functional>
#include <memory>

#include "engine/tensor.h"

namespace mantissa::autograd {

// What a pack hook stores instead of a saved tensor.
class PackedSaved {
 public:
  virtual ~PackedSaved() = default;
  // The saved tensor, for a node's backward.
  virtual Tensor unpack() = 0;
  // The node's backward is done with it (the graph is being freed).
  virtual void release() {}
};

// Returns the handle that replaces `saved`, or null to save the tensor itself.
using PackHook = std::function<std::shared_ptr<PackedSaved>(const Tensor& saved)>;

// Installs `hook` on this thread for its scope; scopes nest (the innermost hook packs).
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(PackHook hook);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  PackHook hook_;
  const PackHook* previous_;
};

// The innermost pack hook installed on this thread, or null.
const PackHook* current_pack_hook();

}  // namespace mantissa::autograd
