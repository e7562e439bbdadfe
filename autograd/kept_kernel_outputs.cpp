#include "autograd/kept_kernel_outputs.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace mantissa::autograd {
namespace {
thread_local KeptKernelOutputs* current = nullptr;
thread_local bool current_replaying = false;
}  // namespace

const std::vector<std::string>& keepable_kernel_ops() {
  static const std::vector<std::string> ops{"scaled_dot_product_attention"};
  return ops;
}

bool KeptKernelOutputs::keeps(const char* op) const {
  return std::find(ops_.begin(), ops_.end(), op) != ops_.end();
}

void KeptKernelOutputs::keep(const char* op, bool handled, const std::vector<Tensor>& outputs) {
  Entry e{op, handled, {}, {}};
  if (handled) {
    for (const Tensor& t : outputs) {
      e.outputs.push_back(t.detach());
      e.versions.push_back(t.version());
    }
  }
  entries_.push_back(std::move(e));
}

bool KeptKernelOutputs::replay(const char* op, const std::vector<Tensor>& outputs) {
  MT_CHECK(next_ < entries_.size(), "checkpoint: recomputing the function ran ", op,
           " more often than its forward did; a checkpointed function must run the same ops "
           "every time");
  const Entry& e = entries_[next_++];
  MT_CHECK(std::strcmp(e.op, op) == 0, "checkpoint: recomputing the function ran ", op,
           " where its forward ran ", e.op,
           "; a checkpointed function must run the same ops every time");
  if (!e.handled) return false;
  MT_CHECK(e.outputs.size() == outputs.size(), "checkpoint: internal error: ", op, " kept ",
           e.outputs.size(), " outputs, its recomputation writes ", outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    MT_CHECK(e.outputs[i].version() == e.versions[i], "checkpoint: an output of ", op,
             " that the checkpoint keeps (save_ops) was modified in place after the forward; "
             "leave it out of save_ops or clone it before modifying it");
    MT_CHECK(
        e.outputs[i].shape() == outputs[i].shape() && e.outputs[i].dtype() == outputs[i].dtype(),
        "checkpoint: recomputing ", op, " gives an output of ", outputs[i].dtype(), " ",
        outputs[i].shape(), " where its forward gave ", e.outputs[i].dtype(), " ",
        e.outputs[i].shape(), "; a checkpointed function must run the same ops every time");
    Tensor out = outputs[i].detach();
    out.copy_(e.outputs[i]);  // not recorded: the op records its own node over `outputs`
  }
  return true;
}

void KeptKernelOutputs::finish_replay() const {
  MT_CHECK(next_ == entries_.size(), "checkpoint: recomputing the function ran ", next_,
           " kernels that its forward kept (save_ops), but its forward ran ", entries_.size(),
           "; a checkpointed function must run the same ops every time");
}

KeptKernelOutputsGuard::KeptKernelOutputsGuard(KeptKernelOutputs* kept, bool replaying)
    : previous_(current), previous_replaying_(current_replaying) {
  current = kept;
  current_replaying = replaying;
}

KeptKernelOutputsGuard::~KeptKernelOutputsGuard() {
  current = previous_;
  current_replaying = previous_replaying_;
}

bool run_keepable_kernel(const char* op, const std::vector<Tensor>& outputs,
                         const std::function<bool()>& kernel) {
  if (current == nullptr || !current->keeps(op)) return kernel();
  if (current_replaying) return current->replay(op, outputs);
  const bool handled = kernel();
  current->keep(op, handled, outputs);
  return handled;
}

}  // namespace mantissa::autograd
