// Autocast at the op boundary, as PyTorch's autocast_mode.h does it: an op's public entry
// (autograd/op_entries.cpp) passes its body and arguments to with_autocast<OpId::x>, and inside an
// autocast scope the op's policy (engine/ops.def) casts the floating tensor arguments before
// the body runs. The body and
// its backward see ordinary tensors and never mention autocast.
//
// Casts are recorded ops (Tensor::to), whose backward converts the gradient back. A weight (a
// float32 leaf that requires grad, in grad mode) is cast once per outermost scope through a
// thread-local cache, so all its uses in the scope share one cast and their gradients are summed
// in the cast dtype before the cast's backward widens them, as in PyTorch. Ops called by a body
// are not cast again (PyTorch excludes its Autocast key for the call); backward runs without
// autocast (autograd/backward.cpp).
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "autograd/op_index.h"
#include "engine/precision.h"
#include "engine/tensor.h"

namespace mantissa::autograd {

// Drops the cached weight casts (the outermost amp::autocast scope does it on exit).
void clear_autocast_cache();
size_t autocast_cache_size();

namespace autocast_detail {

// What a policy does to one tensor: the dtype it becomes, or t itself.
Tensor cast_for(CastPolicy policy, const Tensor& t, DType promote_to);
// PyTorch's promote rule: the scopes' lower-precision dtype promoted with every floating
// argument on an autocast device.
DType promote_dtype(const std::vector<const Tensor*>& tensors);
// Throws for a Banned op given a floating tensor on a device with an autocast scope.
void refuse_banned(const char* op, const std::vector<const Tensor*>& tensors);

template <typename T>
inline constexpr bool is_tensor_v = std::is_same_v<std::decay_t<T>, Tensor>;
template <typename T>
inline constexpr bool is_tensor_list_v = std::is_same_v<std::decay_t<T>, std::vector<Tensor>>;

template <typename T>
void collect(std::vector<const Tensor*>& out, const T& arg) {
  if constexpr (is_tensor_v<T>) {
    out.push_back(&arg);
  } else if constexpr (is_tensor_list_v<T>) {
    for (const Tensor& t : arg) out.push_back(&t);
  }
}

template <typename T>
decltype(auto) cast_arg(CastPolicy policy, DType promote_to, T&& arg) {
  if constexpr (is_tensor_v<T>) {
    return cast_for(policy, arg, promote_to);
  } else if constexpr (is_tensor_list_v<T>) {
    std::vector<Tensor> out;
    out.reserve(arg.size());
    for (const Tensor& t : arg) out.push_back(cast_for(policy, t, promote_to));
    return out;
  } else {
    return std::forward<T>(arg);
  }
}

// Turns autocast off for the ops a body calls, and back on after it (also on a throw).
class Excluded {
 public:
  Excluded() : saved_(autocast_state::current().any_cast) {
    autocast_state::current().any_cast = false;
  }
  ~Excluded() { autocast_state::current().any_cast = saved_; }
  Excluded(const Excluded&) = delete;
  Excluded& operator=(const Excluded&) = delete;

 private:
  bool saved_;
};

}  // namespace autocast_detail

template <OpId Op, typename Body, typename... Args>
decltype(auto) with_autocast(Body&& body, Args&&... args) {
  constexpr CastPolicy policy = cast_policy(Op);
  if constexpr (policy == CastPolicy::None) {
    return body(std::forward<Args>(args)...);
  } else if constexpr (policy == CastPolicy::Banned) {
    if (autocast_state::any_cast_enabled()) [[unlikely]] {
      std::vector<const Tensor*> tensors;
      (autocast_detail::collect(tensors, args), ...);
      autocast_detail::refuse_banned(op_info(Op).name, tensors);
    }
    return body(std::forward<Args>(args)...);
  } else if constexpr (policy == CastPolicy::LowerPrecisionInput) {
    if (!autocast_state::any_cast_enabled()) [[likely]]
      return body(std::forward<Args>(args)...);
    autocast_detail::Excluded excluded;
    // The first argument (the input) only: the op casts its weights itself.
    return [&]<typename First, typename... Rest>(First&& first, Rest&&... rest) -> decltype(auto) {
      return body(autocast_detail::cast_arg(policy, DType::Float32, std::forward<First>(first)),
                  std::forward<Rest>(rest)...);
    }(std::forward<Args>(args)...);
  } else {
    if (!autocast_state::any_cast_enabled()) [[likely]]
      return body(std::forward<Args>(args)...);
    DType promote_to = DType::Float32;
    if constexpr (policy == CastPolicy::Promote) {
      std::vector<const Tensor*> tensors;
      (autocast_detail::collect(tensors, args), ...);
      promote_to = autocast_detail::promote_dtype(tensors);
    }
    autocast_detail::Excluded excluded;
    return body(autocast_detail::cast_arg(policy, promote_to, std::forward<Args>(args))...);
  }
}

}  // namespace mantissa::autograd
