// The activations with their backward formulas: relu, gelu, silu, mish and hardswish (unary
// kernels; under create_graph every backward is built from differentiable ops) and the ones with
// parameters, leaky_relu, elu and softplus (first-order backward kernels; their kernels are in
// kernels/{cpu,cuda}/pointwise_kernels). sigmoid and tanh are with the unary math in
// elementwise.cpp.
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::creating_graph;
using autograd::DoubleBackward;
using autograd::Recorder;
using Grads = std::vector<Tensor>;
using ops::kSaveIn;
using ops::kSaveOut;
using ops::run_binary_same;
using ops::unary_op;

// gelu'(x) = Phi(x) + x phi(x) from the kernel, recorded with its own derivative
// gelu''(x) = phi(x) (2 - x^2): there is no differentiable erf to compose Phi from.
Tensor gelu_derivative(const Tensor& x) {
  Tensor out = run_binary_same(gelu_backward_kernel, ones_like(x), x);
  if (Recorder rec{"GeluBackwardBackward0", {&x}}) {
    rec.save(x);
    rec.finish(
        out,
        [](BackwardContext& ctx) -> Grads {
          const Tensor in = ctx.saved(0), x2 = in * in;
          const Tensor pdf = exp(x2 * -0.5) * 0.3989422804014327;  // 1 / sqrt(2 pi)
          return {ctx.grad() * pdf * (2.0 - x2)};
        },
        DoubleBackward::Supported);
  }
  return out;
}

// The tanh approximation's derivative, composed of differentiable ops:
// 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2), t = tanh(k (x + c x^3)).
Tensor gelu_tanh_derivative(const Tensor& x) {
  constexpr double k = 0.7978845608028654, c = 0.044715;  // sqrt(2 / pi)
  const Tensor x2 = x * x;
  const Tensor t = tanh((x + x * x2 * c) * k);
  return (t + 1.0) * 0.5 + x * (1.0 - t * t) * (x2 * (3.0 * c) + 1.0) * (0.5 * k);
}

Tensor param_activation(const char* node, const KernelTable<ParamActivationKernel>& forward,
                        const KernelTable<ParamActivationBackwardKernel>& backward, const Tensor& x,
                        double p0, double p1) {
  Tensor out = ops::empty_as(x.shape(), x);
  forward(x.device())(out, x, p0, p1);
  if (Recorder rec{node, {&x}}) {
    rec.save(x);
    rec.finish(out, [&backward, p0, p1](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad(), in = ctx.saved(0);
      Tensor grad_in = ops::empty_as(g.shape(), g);
      backward(g.device())(grad_in, g, in, p0, p1);
      return {grad_in};
    });
  }
  return out;
}

}  // namespace

Tensor relu_op(const Tensor& x) {
  return unary_op("ReluBackward0", relu_kernel, x, false, kSaveOut,
                  [](const Tensor& g, const Tensor&, const Tensor& out) {
                    if (creating_graph()) return where(out > 0.0, g, 0.0);
                    return run_binary_same(relu_backward_kernel, g, out);
                  });
}
Tensor gelu_op(const Tensor& x, std::string_view approximate) {
  MT_CHECK(approximate == "none" || approximate == "tanh",
           "gelu: approximate must be 'none' or "
           "'tanh', got '",
           approximate, "'");
  if (approximate == "tanh") {
    return unary_op("GeluBackward0", gelu_tanh_kernel, x, false, kSaveIn,
                    [](const Tensor& g, const Tensor& in, const Tensor&) {
                      if (creating_graph()) return g * gelu_tanh_derivative(in);
                      return run_binary_same(gelu_tanh_backward_kernel, g, in);
                    });
  }
  return unary_op("GeluBackward0", gelu_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (creating_graph()) return g * gelu_derivative(in);
                    return run_binary_same(gelu_backward_kernel, g, in);
                  });
}
Tensor silu_op(const Tensor& x) {
  return unary_op("SiluBackward0", silu_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (creating_graph()) {
                      const Tensor s = sigmoid(in);
                      return g * s * (in * (1.0 - s) + 1.0);
                    }
                    return run_binary_same(silu_backward_kernel, g, in);
                  });
}
Tensor mish_op(const Tensor& x) {
  return unary_op("MishBackward0", mish_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (creating_graph()) {
                      // softplus from ops differentiable to any order, so that this gradient
                      // can be differentiated again: x + log1p(exp(-x)) above 0, log1p(exp(x))
                      // up to 0, each branch fed values its exp cannot overflow on (a NaN in the
                      // unselected branch would reach the gradient through where's zeros).
                      const Tensor pos = in > 0.0;
                      const Tensor xp = where(pos, in, 0.0), xn = where(in <= 0.0, in, 0.0);
                      const Tensor t = tanh(where(pos, xp + log1p(exp(-xp)), log1p(exp(xn))));
                      return g * (t + in * sigmoid(in) * (1.0 - t * t));
                    }
                    return run_binary_same(mish_backward_kernel, g, in);
                  });
}
Tensor hardswish_op(const Tensor& x) {
  return unary_op("HardswishBackward0", hardswish_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (creating_graph()) {
                      const Tensor slope = where(in < 3.0, in / 3.0 + 0.5, 1.0);
                      return g * where(in <= -3.0, zeros_like(in), slope);
                    }
                    return run_binary_same(hardswish_backward_kernel, g, in);
                  });
}

Tensor leaky_relu_op(const Tensor& x, double negative_slope) {
  return param_activation("LeakyReluBackward0", leaky_relu_kernel, leaky_relu_backward_kernel, x,
                          negative_slope, 0.0);
}
Tensor elu_op(const Tensor& x, double alpha) {
  return param_activation("EluBackward0", elu_kernel, elu_backward_kernel, x, alpha, 0.0);
}
Tensor softplus_op(const Tensor& x, double beta, double threshold) {
  return param_activation("SoftplusBackward0", softplus_kernel, softplus_backward_kernel, x, beta,
                          threshold);
}

}  // namespace mantissa
