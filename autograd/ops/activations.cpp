// The activations with their backward formulas: relu and gelu (unary kernels; under create_graph
// their backward is built from differentiable ops) and the list of engine/activations.def, whose
// bodies are made here from the list: the entry's forward kernel, and a node whose backward runs
// the entry's backward kernel, or, under create_graph, the entry's derivative formula
// (engine/activation_formulas.h) on Tensors. sigmoid and tanh are with the unary math in
// elementwise.cpp.
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "engine/activation_formulas.h"
#include "engine/activation_kernel_tables.h"

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

// A parameter's check, as torch.nn.functional's: `nonzero` is refused by the op (PyTorch raises
// ZeroDivisionError); `positive` is a config key's check only (the op takes any value).
void check_param_any(const char*, const char*, double) {}
void check_param_positive(const char*, const char*, double) {}
void check_param_nonzero(const char* op, const char* param, double v) {
  MT_CHECK(v != 0.0, op, ": ", param, " cannot be 0 (ZeroDivisionError in PyTorch)");
}

// An entry of engine/activations.def: out = f(x; p0, p1) by its kernel; the node saves x, and its
// backward is grad * f'(x), by the backward kernel, or by the formula on Tensors when the graph
// of the backward is recorded (so the derivative is differentiable again).
template <typename Math>
Tensor listed_activation(const char* node, const KernelTable<ActivationKernel>& forward,
                         const KernelTable<ActivationBackwardKernel>& backward, const Tensor& x,
                         double p0, double p1) {
  Tensor out = ops::empty_as(x.shape(), x);
  forward(x.device())(out, x, p0, p1);
  if (Recorder rec{node, {&x}}) {
    rec.save(x);
    rec.finish(
        out,
        [&backward, p0, p1](BackwardContext& ctx) -> Grads {
          const Tensor g = ctx.grad(), in = ctx.saved(0);
          if (creating_graph()) return {g * Math::derivative(in, formulas::Params<double>{p0, p1})};
          Tensor grad_in = ops::empty_as(g.shape(), g);
          backward(g.device())(grad_in, g, in, p0, p1);
          return {grad_in};
        },
        DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

Tensor relu_op(const Tensor& x) {
  return unary_op("ReluBackward0", relu_kernel, x, false, kSaveOut,
                  [](const Tensor& g, const Tensor&, const Tensor& out) {
                    if (creating_graph()) return formulas::relu_grad(g, out);
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
                      if (creating_graph()) return formulas::gelu_tanh_grad(g, in);
                      return run_binary_same(gelu_tanh_backward_kernel, g, in);
                    });
  }
  return unary_op("GeluBackward0", gelu_kernel, x, false, kSaveIn,
                  [](const Tensor& g, const Tensor& in, const Tensor&) {
                    if (creating_graph()) return g * gelu_derivative(in);
                    return run_binary_same(gelu_backward_kernel, g, in);
                  });
}
#define MT_ACTIVATION(name, Module, Math, node, policy)                                           \
  Tensor name##_op(const Tensor& x) {                                                             \
    return listed_activation<formulas::Math>(node, name##_kernel, name##_backward_kernel, x, 0.0, \
                                             0.0);                                                \
  }
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0)                   \
  Tensor name##_op(const Tensor& x, double p0) {                                                 \
    check_param_##c0(#name, #p0, p0);                                                            \
    return listed_activation<formulas::Math>(node, name##_kernel, name##_backward_kernel, x, p0, \
                                             0.0);                                               \
  }
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1,   \
                       doc1)                                                                     \
  Tensor name##_op(const Tensor& x, double p0, double p1) {                                      \
    check_param_##c0(#name, #p0, p0);                                                            \
    check_param_##c1(#name, #p1, p1);                                                            \
    return listed_activation<formulas::Math>(node, name##_kernel, name##_backward_kernel, x, p0, \
                                             p1);                                                \
  }
#include "engine/activations.def"

// A constant branch of a formula's where(), as a Tensor (engine/activation_formulas.h).
Tensor formulas::like(const Tensor& x, double c) { return full_like(x, c); }

}  // namespace mantissa
