#include "autograd/saved_tensor_hooks.h"

namespace mantissa::autograd {
namespace {
thread_local const PackHook* current_hook = nullptr;
}  // namespace

SavedTensorHooksGuard::SavedTensorHooksGuard(PackHook hook)
    : hook_(std::move(hook)), previous_(current_hook) {
  current_hook = &hook_;
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() { current_hook = previous_; }

const PackHook* current_pack_hook() { return current_hook; }

}  // namespace mantissa::autograd
