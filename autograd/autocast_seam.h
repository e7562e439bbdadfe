// The seam through which autocast (amp/) casts an op's inputs. An op with a mixed-precision
// policy calls cast_input(OpId::x, t) on each floating input before dispatching; outside an
// autocast scope that is one thread-local read. amp/autocast.cpp installs the cast function.
#pragma once

#include "engine/op_id.h"
#include "engine/precision.h"
#include "engine/tensor.h"

namespace mantissa::autocast {

using CastHook = Tensor (*)(OpId op, const Tensor& t);
void set_cast_hook(CastHook hook);
Tensor call_cast_hook(OpId op, const Tensor& t);

inline Tensor cast_input(OpId op, const Tensor& t) {
  if (!autocast_state::any_cast_enabled() || !t.defined()) [[likely]]
    return t;
  return call_cast_hook(op, t);
}

}  // namespace mantissa::autocast
