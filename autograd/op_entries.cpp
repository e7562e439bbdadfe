// The public entry of every op in the op list (autograd/ops.def): its autocast policy applied to
// the arguments (autograd/autocast_wrapper.h), then its body, name_op. This is the only place
// autocast is applied.
#include <utility>

#include "autograd/autocast_wrapper.h"
#include "autograd/op_bodies.h"

namespace mantissa {

#define MT_UNPARENTHESIZE(...) __VA_ARGS__
#define MT_SIG(name, ret, params, args)                                                \
  ret name params {                                                                    \
    return autograd::with_autocast<OpId::name>(                                        \
        [](auto&&... a) -> ret { return name##_op(std::forward<decltype(a)>(a)...); }, \
        MT_UNPARENTHESIZE args);                                                       \
  }
#include "autograd/ops.def"
#undef MT_UNPARENTHESIZE

}  // namespace mantissa
