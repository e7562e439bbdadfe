// The seam through which autocast (amp/) casts an op's inputs. An op with a mixed-precision
// policy calls cast_input(OpId::x, t) on each floating input before dispatching; outside an
// autocast scope that is one thread-local read. amp/autocast.cpp installs the cast function.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "engine/op_id.h"
#include "engine/precision.h"
#include "engine/tensor.h"

namespace mantissa::autograd {
class Node;
}

namespace mantissa::autocast {

using CastHook = Tensor (*)(OpId op, const Tensor& t);
void set_cast_hook(CastHook hook);
Tensor call_cast_hook(OpId op, const Tensor& t);

// Direct casts of weights. A cast of a weight (a float32 leaf that requires grad) is normally a
// node of its own whose backward converts the gradient back to float32. An op may instead round
// such a weight itself, record the float32 weight as its input and return the gradient in the
// autocast dtype; the engine converts it when it reaches the weight (AccumulateGrad). That saves
// a node per weight per step and gives the same bits, as long as the weight has one use in the
// scope: a later cast of the same weight in the scope reroutes the op's input through that
// cast's node (register_direct_cast), so that all uses' gradients are summed in the autocast
// dtype before the conversion, as with one shared cast.
struct DirectCastHooks {
  // The dtype `t` is rounded to when it qualifies (autocast lowers `op` on its device, t is a
  // float32 leaf requiring grad in grad mode, and no cast of t is cached in this scope).
  std::optional<DType> (*dtype)(OpId op, const Tensor& t) = nullptr;
  void (*record)(const Tensor& t, DType dtype, const std::shared_ptr<autograd::Node>& node,
                 uint32_t input_nr) = nullptr;
  // Whether autocast would widen `t` (float16/bfloat16) to float32 for `op`.
  bool (*widens)(OpId op, const Tensor& t) = nullptr;
  // The dtype autocast would lower float32 `t` to for `op` when t is not a weight (no cast of it
  // is cached or shared), else nullopt.
  std::optional<DType> (*lowers)(OpId op, const Tensor& t) = nullptr;
};
void set_direct_cast_hooks(DirectCastHooks hooks);

// The dtype an op rounds weight `t` to itself, or nullopt: then it casts t with cast_input.
inline std::optional<DType> direct_cast_dtype(OpId op, const Tensor& t);
// Float32 ops (the float32 list of autocast) may likewise read a float16/bfloat16 input widened
// themselves instead of through a cast copy: widening is exact, so they need only give the input
// its gradient in its own dtype, rounded as the cast's backward rounds it. True when autocast
// would widen `t` for `op`.
inline bool direct_widen(OpId op, const Tensor& t);
// Likewise an op may round a float32 input that is not a weight (an activation) itself: the
// dtype autocast would cast it to, or nullopt. Its gradient, made in that dtype, is converted
// back by the engine, as the cast's backward would.
inline std::optional<DType> direct_lower_dtype(OpId op, const Tensor& t);
// Called once the op is recorded, for each weight it rounded itself (input `input_nr` of node).
void register_direct_cast(const Tensor& t, DType dtype, const std::shared_ptr<autograd::Node>& node,
                          uint32_t input_nr);

inline Tensor cast_input(OpId op, const Tensor& t) {
  if (!autocast_state::any_cast_enabled() || !t.defined()) [[likely]]
    return t;
  return call_cast_hook(op, t);
}

std::optional<DType> call_direct_cast_dtype(OpId op, const Tensor& t);

inline std::optional<DType> direct_cast_dtype(OpId op, const Tensor& t) {
  if (!autocast_state::any_cast_enabled() || !t.defined()) [[likely]]
    return std::nullopt;
  return call_direct_cast_dtype(op, t);
}

bool call_direct_widen(OpId op, const Tensor& t);
std::optional<DType> call_direct_lower_dtype(OpId op, const Tensor& t);

inline std::optional<DType> direct_lower_dtype(OpId op, const Tensor& t) {
  if (!autocast_state::any_cast_enabled() || !t.defined()) [[likely]]
    return std::nullopt;
  return call_direct_lower_dtype(op, t);
}

inline bool direct_widen(OpId op, const Tensor& t) {
  if (!autocast_state::any_cast_enabled() || !t.defined()) [[likely]]
    return false;
  return call_direct_widen(op, t);
}

}  // namespace mantissa::autocast
