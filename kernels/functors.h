// Elementwise math shared by the CPU and CUDA kernels: one functor per op, evaluated in OpMath
// (float for half types). Each functor names its op and the dtypes it supports.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/dispatch.h"
#include "kernels/activation_math.h"

namespace mantissa::functors {

#define MT_UNARY_FUNCTOR(Name, op_name, types, expr) \
  struct Name {                                      \
    static constexpr const char* name = op_name;     \
    static constexpr uint32_t dtypes = types;        \
    template <typename T>                            \
    MT_HOST_DEVICE T operator()(T x) const {         \
      return expr;                                   \
    }                                                \
  };

template <typename T>
MT_HOST_DEVICE inline T sigmoid_of(T x) {
  return T(1) / (T(1) + MT_MATH(exp)(-x));
}
using activation::is_negative;

// Signed types (everything but bool and uint8 for neg/abs).
inline constexpr uint32_t kSignedTypes =
    kFloatingTypes | dtype_bit(DType::Int32) | dtype_bit(DType::Int64);
inline constexpr uint32_t kNumberTypes = kAllTypes;

MT_UNARY_FUNCTOR(Neg, "neg", kSignedTypes, -x)
MT_UNARY_FUNCTOR(Abs, "abs", kNumberTypes, is_negative(x) ? T(-x) : x)
MT_UNARY_FUNCTOR(Exp, "exp", kFloatingTypes, MT_MATH(exp)(x))
MT_UNARY_FUNCTOR(Log, "log", kFloatingTypes, MT_MATH(log)(x))
MT_UNARY_FUNCTOR(Sqrt, "sqrt", kFloatingTypes, MT_MATH(sqrt)(x))
MT_UNARY_FUNCTOR(Rsqrt, "rsqrt", kFloatingTypes, T(1) / MT_MATH(sqrt)(x))
// The activations' math is kernels/activation_math.h, shared with the fused linear kernels.
MT_UNARY_FUNCTOR(Relu, "relu", kNumberTypes, activation::relu(x))
MT_UNARY_FUNCTOR(Sigmoid, "sigmoid", kFloatingTypes, sigmoid_of(x))
MT_UNARY_FUNCTOR(Tanh, "tanh", kFloatingTypes, MT_MATH(tanh)(x))
MT_UNARY_FUNCTOR(Silu, "silu", kFloatingTypes, x* sigmoid_of(x))
MT_UNARY_FUNCTOR(Gelu, "gelu", kFloatingTypes, activation::gelu(x))
MT_UNARY_FUNCTOR(GeluTanh, "gelu_tanh", kFloatingTypes, activation::gelu_tanh(x))
MT_UNARY_FUNCTOR(Sign, "sign", kSignedTypes, T((T(0) < x) - (x < T(0))))
MT_UNARY_FUNCTOR(Reciprocal, "reciprocal", kFloatingTypes, T(1) / x)
MT_UNARY_FUNCTOR(Sin, "sin", kFloatingTypes, MT_MATH(sin)(x))
MT_UNARY_FUNCTOR(Cos, "cos", kFloatingTypes, MT_MATH(cos)(x))
MT_UNARY_FUNCTOR(Log1p, "log1p", kFloatingTypes, MT_MATH(log1p)(x))
MT_UNARY_FUNCTOR(Expm1, "expm1", kFloatingTypes, MT_MATH(expm1)(x))
MT_UNARY_FUNCTOR(Square, "square", kNumberTypes, x* x)
#undef MT_UNARY_FUNCTOR

#define MT_BINARY_FUNCTOR(Name, op_name, types, expr) \
  struct Name {                                       \
    static constexpr const char* name = op_name;      \
    static constexpr uint32_t dtypes = types;         \
    template <typename T>                             \
    MT_HOST_DEVICE T operator()(T a, T b) const {     \
      return expr;                                    \
    }                                                 \
  };

template <typename T>
MT_HOST_DEVICE inline T pow_of(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (is_negative(b)) return a == T(1) ? T(1) : (a == T(-1) ? ((b & 1) ? T(-1) : T(1)) : T(0));
    T result = 1;
    while (b) {
      if (b & 1) result *= a;
      a *= a;
      b >>= 1;
    }
    return result;
  } else {
    return MT_MATH(pow)(a, b);
  }
}
// maximum/minimum propagate NaN, as torch.maximum does.
template <typename T>
MT_HOST_DEVICE inline bool is_nan_value(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  return false;
}

MT_BINARY_FUNCTOR(Mul, "mul", kNumberTypes, a* b)
MT_BINARY_FUNCTOR(Div, "div", kFloatingTypes, a / b)
MT_BINARY_FUNCTOR(Pow, "pow", kNumberTypes, pow_of(a, b))
MT_BINARY_FUNCTOR(Maximum, "maximum", kNumberTypes,
                  is_nan_value(a) ? a : (is_nan_value(b) ? b : (a > b ? a : b)))
MT_BINARY_FUNCTOR(Minimum, "minimum", kNumberTypes,
                  is_nan_value(a) ? a : (is_nan_value(b) ? b : (a < b ? a : b)))
#undef MT_BINARY_FUNCTOR

#define MT_COMPARISON_FUNCTOR(Name, op_name, expr)       \
  struct Name {                                          \
    static constexpr const char* name = op_name;         \
    static constexpr uint32_t dtypes = kAllTypesAndBool; \
    template <typename T>                                \
    MT_HOST_DEVICE bool operator()(T a, T b) const {     \
      return expr;                                       \
    }                                                    \
  };
MT_COMPARISON_FUNCTOR(Eq, "eq", a == b)
MT_COMPARISON_FUNCTOR(Ne, "ne", a != b)
MT_COMPARISON_FUNCTOR(Lt, "lt", a < b)
MT_COMPARISON_FUNCTOR(Le, "le", a <= b)
MT_COMPARISON_FUNCTOR(Gt, "gt", a > b)
MT_COMPARISON_FUNCTOR(Ge, "ge", a >= b)
#undef MT_COMPARISON_FUNCTOR

// Backward functors: (grad_out, saved) -> grad_in, saved being the forward input or output.
#define MT_BACKWARD_FUNCTOR(Name, op_name, expr)       \
  struct Name {                                        \
    static constexpr const char* name = op_name;       \
    static constexpr uint32_t dtypes = kFloatingTypes; \
    template <typename T>                              \
    MT_HOST_DEVICE T operator()(T g, T s) const {      \
      return expr;                                     \
    }                                                  \
  };
MT_BACKWARD_FUNCTOR(ReluBackward, "relu_backward", activation::relu_backward(g, s))
MT_BACKWARD_FUNCTOR(GeluBackward, "gelu_backward", g* activation::gelu_derivative(s))
MT_BACKWARD_FUNCTOR(GeluTanhBackward, "gelu_tanh_backward", g* activation::gelu_tanh_derivative(s))
MT_BACKWARD_FUNCTOR(
    SiluBackward, "silu_backward", g* [&] {
      const T sg = sigmoid_of(s);
      return sg * (T(1) + s * (T(1) - sg));
    }())
MT_BACKWARD_FUNCTOR(SigmoidBackward, "sigmoid_backward", g* s*(T(1) - s))
MT_BACKWARD_FUNCTOR(TanhBackward, "tanh_backward", g*(T(1) - s * s))
#undef MT_BACKWARD_FUNCTOR

}  // namespace mantissa::functors
