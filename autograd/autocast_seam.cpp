#include "autograd/autocast_seam.h"

namespace mantissa::autocast {
namespace {
CastHook& hook_slot() {
  static CastHook hook = nullptr;
  return hook;
}
DirectCastHooks& direct_slot() {
  static DirectCastHooks hooks;
  return hooks;
}
}  // namespace

void set_direct_cast_hooks(DirectCastHooks hooks) { direct_slot() = hooks; }

std::optional<DType> call_direct_cast_dtype(OpId op, const Tensor& t) {
  const auto hook = direct_slot().dtype;
  return hook ? hook(op, t) : std::nullopt;
}

bool call_direct_widen(OpId op, const Tensor& t) {
  const auto hook = direct_slot().widens;
  return hook != nullptr && hook(op, t);
}

std::optional<DType> call_direct_lower_dtype(OpId op, const Tensor& t) {
  const auto hook = direct_slot().lowers;
  return hook ? hook(op, t) : std::nullopt;
}

void register_direct_cast(const Tensor& t, DType dtype, const std::shared_ptr<autograd::Node>& node,
                          uint32_t input_nr) {
  if (const auto hook = direct_slot().record) hook(t, dtype, node, input_nr);
}

void set_cast_hook(CastHook hook) { hook_slot() = hook; }

Tensor call_cast_hook(OpId op, const Tensor& t) {
  CastHook hook = hook_slot();
  return hook ? hook(op, t) : t;
}

}  // namespace mantissa::autocast
