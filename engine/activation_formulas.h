// The math of the listed activations (engine/activations.def), written once: each struct gives
// forward(x, p) and derivative(x, p), d f(x) / dx, with p.p0 and p.p1 the op's parameters.
//
// forward is evaluated on scalars only, by the CPU and CUDA kernels in OpMath (float for the half
// types; MT_HOST_DEVICE). derivative is written over any value V with the primitives below: the
// kernels evaluate it on scalars (the backward kernel multiplies it by the incoming gradient), and
// the op's autograd node, under create_graph, evaluates the same formula on Tensors with the
// differentiable ops (mantissa::exp, sigmoid, where, ...), so the op's double backward is the
// derivative of its derivative and nothing is written twice. A formula must therefore stay
// finite, and keep a finite derivative, on both: it takes exp of min(x, 0) rather than of x in a
// branch where() discards (0 * inf would poison the discarded branch's gradient), and calls
// softplus (the Tensor op is stable in both) rather than log1p(exp(x)).
//
// Primitives: arithmetic with k<V>(c) constants, comparisons, where(c, a, b) with V branches (a
// constant branch is like(x, c)), exp, expm1, log1p, tanh, abs, sigmoid, softplus. On scalars they
// are the math library's functions (PyTorch's formulas: softplus is log1p(exp(x)), sigmoid
// 1 / (1 + exp(-x))); on Tensors the ops of the same name.
#pragma once

#include <cmath>
#include <type_traits>

#include "engine/macros.h"

namespace mantissa {
class Tensor;

namespace formulas {

// The parameters of a call, in OpMath (kernels) or double (Tensor formulas).
template <typename T>
struct Params {
  T p0 = T(0), p1 = T(0);
};

template <typename T>
using if_scalar = std::enable_if_t<std::is_floating_point_v<T>, int>;

// A constant in arithmetic with V: V itself for a scalar (so float math stays float), a double
// for a Tensor.
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE constexpr auto k(double c) {
  if constexpr (std::is_floating_point_v<V>) {
    return V(c);
  } else {
    return c;
  }
}

// ---- the scalar primitives (the Tensor ones are the ops of the same name) ----------------------
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T exp(T x) {
  return MT_MATH(exp)(x);
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T expm1(T x) {
  return MT_MATH(expm1)(x);
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T log1p(T x) {
  return MT_MATH(log1p)(x);
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T tanh(T x) {
  return MT_MATH(tanh)(x);
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T abs(T x) {
  return x < T(0) ? -x : x;
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T sigmoid(T x) {
  return T(1) / (T(1) + MT_MATH(exp)(-x));
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T softplus(T x) {
  return MT_MATH(log1p)(MT_MATH(exp)(x));
}
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T where(bool c, T a, T b) {
  return c ? a : b;
}
// A constant with x's type (and, for a Tensor, its shape and device), for a branch of where().
template <typename T, if_scalar<T> = 0>
MT_HOST_DEVICE MT_FORCE_INLINE T like(T, double c) {
  return T(c);
}
// The Tensor form, defined with the ops (autograd/ops/activations.cpp).
Tensor like(const Tensor& x, double c);

// min(x, 0): what exp() may take in a branch that where() discards for x > 0.
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE V min0(const V& x) {
  return where(x <= k<V>(0), x, like(x, 0.0));
}

// ---- the backward of relu, sigmoid, tanh and gelu's tanh form -----------------------------------
// grad_in from the incoming gradient g and what the op saved, s: its output for relu, sigmoid and
// tanh, its input for gelu(approximate="tanh"). Written once over V, as the derivatives below:
// the backward functors of kernels/functors.h evaluate them on scalars (in OpMath), and the ops'
// nodes under create_graph on Tensors, so their double backward is these formulas' derivative.

// PyTorch's threshold_backward: 0 where s <= 0, else g (a NaN s passes g through).
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE V relu_grad(const V& g, const V& s) {
  return where(s <= k<V>(0), like(g, 0.0), g);
}
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE V sigmoid_grad(const V& g, const V& s) {
  return g * s * (k<V>(1) - s);
}
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE V tanh_grad(const V& g, const V& s) {
  return g * (k<V>(1) - s * s);
}
// gelu(approximate="tanh") is 0.5 x (1 + tanh(inner(x))), inner(x) = b (x + c x^3), b = sqrt(2 /
// pi), c = 0.044715 (the forward: kernels/activation_math.h's gelu_tanh, and cuBLASLt's epilogue).
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE V gelu_tanh_inner(const V& x) {
  return k<V>(0.7978845608028654) * (x + k<V>(0.044715) * x * x * x);
}
template <typename V>
MT_HOST_DEVICE MT_FORCE_INLINE V gelu_tanh_grad(const V& g, const V& s) {
  const V th = tanh(gelu_tanh_inner(s));
  const V dinner = k<V>(0.7978845608028654) * (k<V>(1) + k<V>(3 * 0.044715) * s * s);
  return g * (k<V>(0.5) * (k<V>(1) + th) + k<V>(0.5) * s * (k<V>(1) - th * th) * dinner);
}

// ---- the activations ----------------------------------------------------------------------------
struct Silu {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P&) {
    return x * sigmoid(x);
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P&) {
    const V s = sigmoid(x);
    return s * (k<V>(1) + x * (k<V>(1) - s));
  }
};

// PyTorch's: exp overflowing to inf gives tanh(inf) = 1.
struct Mish {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P&) {
    return x * tanh(softplus(x));
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P&) {
    const V t = tanh(softplus(x));
    return t + x * sigmoid(x) * (k<V>(1) - t * t);
  }
};

// Today's PyTorch (2.7 on) derivative: 0 up to -3, x / 3 + 1/2 strictly between -3 and 3, 1 from
// 3 on (NaN takes 1). PyTorch 1.13 gave x / 3 + 1/2 at both ends.
struct Hardswish {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P&) {
    return x * (x + T(3) < T(0) ? T(0) : (x + T(3) > T(6) ? T(6) : x + T(3))) / T(6);
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P&) {
    return where(x <= k<V>(-3), like(x, 0.0),
                 where(x < k<V>(3), x / k<V>(3) + k<V>(0.5), like(x, 1.0)));
  }
};

// PyTorch's elu kernel: x <= 0 ? (exp(x * input_scale) - 1) * alpha * scale : x * scale.
struct Elu {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P& p) {
    return x <= T(0) ? expm1(x) * p.p0 : x;
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P& p) {
    return where(x <= k<V>(0), p.p0 * exp(min0(x)), like(x, 1.0));
  }
};

struct Selu {
  static constexpr double kAlpha = 1.6732632423543772848170429916717;
  static constexpr double kScale = 1.0507009873554804934193349852946;
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P&) {
    return x <= T(0) ? expm1(x) * (T(kAlpha) * T(kScale)) : x * T(kScale);
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P&) {
    return where(x <= k<V>(0), (k<V>(kAlpha) * k<V>(kScale)) * exp(min0(x)), like(x, kScale));
  }
};

// elu(x, alpha) with input_scale 1 / alpha, as PyTorch computes it.
struct Celu {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P& p) {
    return x <= T(0) ? expm1(x * (T(1) / p.p0)) * p.p0 : x;
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P& p) {
    const auto inv = k<V>(1) / p.p0;
    return where(x <= k<V>(0), inv * p.p0 * exp(min0(x) * inv), like(x, 1.0));
  }
};

struct LeakyRelu {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P& p) {
    return x > T(0) ? x : x * p.p0;
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P& p) {
    return where(x > k<V>(0), like(x, 1.0), like(x, 1.0) * p.p0);
  }
};

// Above the threshold (in beta x) softplus is x itself, which also keeps exp from overflowing.
struct Softplus {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P& p) {
    return x * p.p0 > p.p1 ? x : log1p(exp(x * p.p0)) / p.p0;
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P& p) {
    return where(x * p.p0 > p.p1, like(x, 1.0), sigmoid(x * p.p0));
  }
};

struct Softsign {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P&) {
    return x / (T(1) + abs(x));
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P&) {
    const V d = k<V>(1) + abs(x);
    return k<V>(1) / (d * d);
  }
};

// min(x, 0) - log1p(exp(-|x|)), which neither overflows nor loses the small values.
struct LogSigmoid {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P&) {
    return (x < T(0) ? x : T(0)) - log1p(exp(-abs(x)));
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P&) {
    return sigmoid(-x);
  }
};

// PyTorch's hardtanh, a clamp: NaN passes (min_val > max_val gives max_val), and its gradient is
// 0 at and beyond either end.
struct Hardtanh {
  template <typename T, typename P>
  MT_HOST_DEVICE static T forward(T x, const P& p) {
    const T lo = x < p.p0 ? p.p0 : x;
    return lo > p.p1 ? p.p1 : lo;
  }
  template <typename V, typename P>
  MT_HOST_DEVICE static V derivative(const V& x, const P& p) {
    return where(x <= p.p0, like(x, 0.0), where(x >= p.p1, like(x, 0.0), like(x, 1.0)));
  }
};

// One struct per list entry, for the kernels of every device: its name (for the dtype error) and
// its formulas (entry::silu::name, entry::silu::Math).
namespace entry {
#define MT_ACTIVATION_ENTRY(op, Module, Formulas) \
  struct op {                                     \
    static constexpr const char* name = #op;      \
    using Math = Formulas;                        \
  };
#include "engine/activations.def"
}  // namespace entry

}  // namespace formulas
}  // namespace mantissa
