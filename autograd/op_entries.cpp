// The public entry of every op in the op list (engine/ops.def): its autocast policy applied to
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
// The Tensor methods of the MT_SIG_METHOD overloads (declared in engine/tensor.h): the entry,
// called on *this.
#define MT_METHOD_PARAMS(self, ...) __VA_ARGS__
#define MT_METHOD_ARGS(self, ...) __VA_OPT__(, ) __VA_ARGS__
#define MT_SIG_METHOD(name, ret, params, args)        \
  MT_SIG(name, ret, params, args)                     \
  ret Tensor::name(MT_METHOD_PARAMS params) const {   \
    return mantissa::name(*this MT_METHOD_ARGS args); \
  }
#include "engine/ops.def"
#undef MT_UNPARENTHESIZE
#undef MT_METHOD_PARAMS
#undef MT_METHOD_ARGS

}  // namespace mantissa
