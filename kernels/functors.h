// Elementwise math shared by the CPU and CUDA kernels: one functor per op, evaluated in OpMath
// (float for half types). Each functor names its op and the dtypes it supports.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "engine/activation_formulas.h"
#include "engine/dispatch.h"
#include "kernels/activation_math.h"

namespace mantissa::functors {

#define MT_UNARY_FUNCTOR(Name, op_name, types, expr)         \
  struct Name {                                              \
    static constexpr const char* name = op_name;             \
    static constexpr uint32_t dtypes = types;                \
    template <typename T>                                    \
    MT_HOST_DEVICE MT_FORCE_INLINE T operator()(T x) const { \
      return expr;                                           \
    }                                                        \
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
// relu and gelu's math is kernels/activation_math.h, shared with the fused linear kernels; the
// other activations are the list of engine/activations.def, whose math is
// engine/activation_formulas.h.
MT_UNARY_FUNCTOR(Relu, "relu", kNumberTypes, activation::relu(x))
MT_UNARY_FUNCTOR(Sigmoid, "sigmoid", kFloatingTypes, sigmoid_of(x))
MT_UNARY_FUNCTOR(Tanh, "tanh", kFloatingTypes, MT_MATH(tanh)(x))
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
#define MT_BACKWARD_FUNCTOR(Name, op_name, expr)                  \
  struct Name {                                                   \
    static constexpr const char* name = op_name;                  \
    static constexpr uint32_t dtypes = kFloatingTypes;            \
    template <typename T>                                         \
    MT_HOST_DEVICE MT_FORCE_INLINE T operator()(T g, T s) const { \
      return expr;                                                \
    }                                                             \
  };
// relu, sigmoid, tanh and gelu's tanh form are engine/activation_formulas.h's, which their nodes
// also evaluate on Tensors under create_graph; exact gelu's derivative needs erf, which has no
// Tensor op: its node records the kernel and writes the second derivative.
MT_BACKWARD_FUNCTOR(ReluBackward, "relu_backward", formulas::relu_grad(g, s))
MT_BACKWARD_FUNCTOR(GeluBackward, "gelu_backward", g* activation::gelu_derivative(s))
MT_BACKWARD_FUNCTOR(GeluTanhBackward, "gelu_tanh_backward", formulas::gelu_tanh_grad(g, s))
MT_BACKWARD_FUNCTOR(SigmoidBackward, "sigmoid_backward", formulas::sigmoid_grad(g, s))
MT_BACKWARD_FUNCTOR(TanhBackward, "tanh_backward", formulas::tanh_grad(g, s))
#undef MT_BACKWARD_FUNCTOR

// ---- pointwise ops (autograd/ops/pointwise.cpp)
// -------------------------------------------------- Integer division by zero never reaches these
// (the ops reject it first, as PyTorch's CPU raises ZeroDivisionError); the guards keep a kernel
// from trapping on it or on INT_MIN / -1.
template <typename T>
MT_HOST_DEVICE inline T floor_divide_of(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0)) return T(0);
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1))
        return static_cast<T>(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
    }
    const T q = a / b, r = a % b;
    return (r != T(0) && is_negative(r) != is_negative(b)) ? T(q - T(1)) : q;
  } else {
    // PyTorch's div_floor_floating: from fmod, so that a quotient just under an integer is not
    // rounded up to it by a / b.
    if (b == T(0)) return a / b;
    const T mod = MT_MATH(fmod)(a, b);
    T div = (a - mod) / b;
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) div -= T(1);
    if (div == T(0)) return MT_MATH(copysign)(T(0), a / b);
    T floordiv = MT_MATH(floor)(div);
    if (div - floordiv > T(0.5)) floordiv += T(1);
    return floordiv;
  }
}
// remainder: the sign of the divisor (Python's %); fmod: the sign of the dividend (C's fmod).
template <typename T>
MT_HOST_DEVICE inline T remainder_of(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0) || (std::is_signed_v<T> && b == T(-1))) return T(0);
    T r = a % b;
    if (r != T(0) && is_negative(r) != is_negative(b)) r += b;
    return r;
  } else {
    T mod = MT_MATH(fmod)(a, b);
    if (mod != T(0) && (b < T(0)) != (mod < T(0))) mod += b;
    return mod;
  }
}
template <typename T>
MT_HOST_DEVICE inline T fmod_of(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == T(0) || (std::is_signed_v<T> && b == T(-1))) return T(0);
    return a % b;
  } else {
    return MT_MATH(fmod)(a, b);
  }
}

struct FloorDivide {
  static constexpr const char* name = "floor_divide";
  static constexpr uint32_t dtypes = kNumberTypes;
  template <typename T>
  MT_HOST_DEVICE T operator()(T a, T b) const {
    return floor_divide_of(a, b);
  }
};
struct Remainder {
  static constexpr const char* name = "remainder";
  static constexpr uint32_t dtypes = kNumberTypes;
  template <typename T>
  MT_HOST_DEVICE T operator()(T a, T b) const {
    return remainder_of(a, b);
  }
};
struct Fmod {
  static constexpr const char* name = "fmod";
  static constexpr uint32_t dtypes = kNumberTypes;
  template <typename T>
  MT_HOST_DEVICE T operator()(T a, T b) const {
    return fmod_of(a, b);
  }
};

// Floating-point class tests (bool results); integers and bools are always finite.
#define MT_PREDICATE_FUNCTOR(Name, op_name, float_expr, other_value) \
  struct Name {                                                      \
    static constexpr const char* name = op_name;                     \
    static constexpr uint32_t dtypes = kAllTypesAndBool;             \
    template <typename T>                                            \
    MT_HOST_DEVICE bool operator()(T x) const {                      \
      if constexpr (std::is_floating_point_v<T>) {                   \
        return float_expr;                                           \
      } else {                                                       \
        return other_value;                                          \
      }                                                              \
    }                                                                \
  };
MT_PREDICATE_FUNCTOR(IsNan, "isnan", x != x, false)
MT_PREDICATE_FUNCTOR(IsInf, "isinf", x - x != x - x && x == x, false)
MT_PREDICATE_FUNCTOR(IsFinite, "isfinite", x - x == x - x, true)
#undef MT_PREDICATE_FUNCTOR

// start + weight * (end - start), from whichever end is nearer to weight, as PyTorch's lerp, so
// that weight 1 gives `end` exactly.
template <typename T>
MT_HOST_DEVICE inline T lerp_of(T start, T end, T weight) {
  const bool small = (weight < T(0) ? -weight : weight) < T(0.5);
  return small ? start + weight * (end - start) : end - (end - start) * (T(1) - weight);
}

}  // namespace mantissa::functors
