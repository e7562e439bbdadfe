// linear, linear_act and linear_act_linear: x [*, in] is folded into one [rows, in] matrix and
// every product runs on the fused linear kernels (engine/kernel_tables.h), so on CUDA the bias
// and activation ride in cuBLASLt epilogues and the bias gradient in the weight-gradient GEMM.
// Backward formulas run kernels directly. Under create_graph, linear without an activation
// computes its gradients with mm and sum instead, so that they can be differentiated again; the
// fused-activation forms do not support create_graph.
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

const char* act_name(LinearActivation act) {
  switch (act) {
    case LinearActivation::None:
      return "none";
    case LinearActivation::Relu:
      return "relu";
    case LinearActivation::GeluTanh:
      return "gelu_tanh";
  }
  return "?";
}

// The checked operands of one linear layer, with x folded to [rows, in].
struct Layer {
  Tensor x2;     // [rows, in] view or copy of x (not recorded)
  Tensor bias1;  // bias as an [out] vector (a stride-0 view for a broadcast bias), or undefined
  Shape out_shape;
  int64_t rows = 0, in = 0, out = 0;
  bool bias_is_vector = false;  // bias has shape [out]: its gradient is the column sums as is
};

Layer check_layer(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  MT_CHECK(x.defined() && weight.defined(), op, ": expected defined input and weight");
  ops::check_same_device(op, x, weight);
  MT_CHECK(x.dtype() == weight.dtype(), op,
           ": expected input and weight to have the same dtype, but got: ", x.dtype(),
           " != ", weight.dtype());
  MT_CHECK(x.dim() >= 1, op, ": expected input with at least 1 dim, got ", x.shape());
  MT_CHECK(weight.dim() == 2, op, ": expected a 2-D weight [out_features, in_features], got ",
           weight.shape());
  Layer l;
  l.in = weight.size(1);
  l.out = weight.size(0);
  MT_CHECK(x.size(-1) == l.in, op, ": input and weight shapes cannot be multiplied (", x.shape(),
           " and ", weight.shape(), "): expected input's last dim to be ", l.in);
  if (bias.defined()) {
    ops::check_same_device(op, x, bias);
    MT_CHECK(bias.dtype() == x.dtype(), op, ": expected bias to have dtype ", x.dtype(),
             ", but got ", bias.dtype());
    MT_CHECK(bias.dim() == 0 || (bias.dim() == 1 && (bias.size(0) == l.out || bias.size(0) == 1)),
             op, ": expected bias of shape [", l.out, "], got ", bias.shape());
    l.bias_is_vector = bias.dim() == 1 && bias.size(0) == l.out;
    // The bias itself when it already is the [out] vector: no view object per call.
    l.bias1 = l.bias_is_vector
                  ? bias
                  : detail::make_view(bias, Shape{l.out}, Shape{0}, bias.storage_offset());
  }
  l.out_shape = x.shape();
  l.out_shape.resize(x.dim() - 1);
  l.rows = l.out_shape.numel();
  l.out_shape.push_back(l.out);
  autograd::NoGradGuard no_grad;
  l.x2 = x.dim() == 2 ? x : x.reshape(Shape{l.rows, l.in});
  return l;
}

// grad_w (and grad_b when wanted) from the pre-activation gradient g [rows, out] and x2, in g's
// dtype.
void weight_and_bias_grads(BackwardContext& ctx, size_t w_index, size_t b_index, const Tensor& g,
                           const Tensor& x2, bool bias_is_vector, const Shape& bias_shape,
                           Tensor& gw, Tensor& gb) {
  const bool want_w = ctx.needs(w_index), want_b = ctx.needs(b_index);
  const auto opts = TensorOptions(g.device()).dtype(g.dtype());
  Tensor gb_vec = want_b ? empty(Shape{g.size(1)}, opts) : Tensor();
  if (want_w) {
    gw = empty(Shape{g.size(1), x2.size(1)}, opts);
    linear_backward_weight_kernel(g.device())(gw, gb_vec, g, x2);
  } else if (want_b) {
    sum_kernel(g.device())(detail::make_view(gb_vec, Shape{1, g.size(1)}, Shape{0, 1}, 0), g);
  }
  if (want_b) gb = bias_is_vector ? gb_vec : autograd::sum_to(gb_vec, bias_shape);
}

// dx = g [rows, out] @ w [out, in], shaped like x, through the act-None form of the fused
// backward kernel: no mm op with its operand views and checks.
Tensor input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape) {
  Tensor gx = ops::empty_as(Shape{g.size(0), w.size(1)}, g);
  linear_backward_act_kernel(g.device())(gx, Tensor(), g, w, Tensor(), Tensor(),
                                         LinearActivation::None);
  return x_shape.size() == 2 ? gx : gx.reshape(x_shape);
}

Tensor linear_act_body(const Tensor& x, const Tensor& weight, const Tensor& bias,
                       LinearActivation act) {
  const Layer l = check_layer("linear", x, weight, bias);
  MT_CHECK(act == LinearActivation::None || is_floating(x.dtype()), "linear: activation ",
           act_name(act), " needs a floating input, got ", x.dtype());

  Tensor out2 = ops::empty_as(Shape{l.rows, l.out}, x);
  const bool record = is_floating(x.dtype()) && autograd::needs_grad({&x, &weight, &bias});
  // GeluTanh's backward reads the pre-activation (aux); ReLU's reads the output.
  const Tensor pre = linear_forward_kernel(x.device())(out2, l.x2, weight, l.bias1, act,
                                                       record && act == LinearActivation::GeluTanh);
  Tensor out = x.dim() == 2
                   ? out2
                   : detail::make_view(out2, l.out_shape, contiguous_strides(l.out_shape), 0);
  if (!record) return out;

  Recorder rec{act == LinearActivation::None ? "LinearBackward0" : "LinearActBackward0",
               {&x, &weight, &bias}};
  // d/dW reads x and d/dx reads W: a frozen weight does not keep the input alive.
  rec.save(weight.requires_grad() ? l.x2 : Tensor())
      .save(x.requires_grad() ? weight : Tensor())
      .save(act == LinearActivation::Relu ? out2 : pre)
      // x itself, for create_graph: x2 is an unrecorded reshape of it.
      .save(act == LinearActivation::None && weight.requires_grad() ? x : Tensor());
  rec.finish(
      out,
      [l_rows = l.rows, l_out = l.out, act, bias_is_vector = l.bias_is_vector, x_shape = x.shape(),
       bias_shape = bias.defined() ? bias.shape() : Shape{}](BackwardContext& ctx) -> Grads {
        const Tensor x2 = ctx.saved(0), w = ctx.saved(1);
        Tensor g = ctx.grad();
        if (g.dim() != 2) g = g.reshape(Shape{l_rows, l_out});
        Tensor gx, gw, gb;
        if (ctx.create_graph()) {
          if (ctx.needs(0)) gx = x_shape.size() == 2 ? mm(g, w) : mm(g, w).reshape(x_shape);
          if (ctx.needs(1))
            gw = mm(g.t(), ctx.saved(3).reshape(Shape{l_rows, x_shape[x_shape.size() - 1]}));
          if (ctx.needs(2)) gb = autograd::sum_to(sum(g, Shape{0}), bias_shape);
          return {gx, gw, gb};
        }
        if (act != LinearActivation::None) {
          const Tensor gz = ops::empty_as(g.shape(), g);
          (act == LinearActivation::Relu ? relu_backward_kernel : gelu_tanh_backward_kernel)(
              g.device())(gz, g, ctx.saved(2));
          g = gz;
        }
        weight_and_bias_grads(ctx, 1, 2, g, x2, bias_is_vector, bias_shape, gw, gb);
        if (ctx.needs(0)) gx = input_grad(g, w, x_shape);
        return {gx, gw, gb};
      },
      act == LinearActivation::None ? autograd::DoubleBackward::Supported
                                    : autograd::DoubleBackward::Unsupported);
  return out;
}

}  // namespace

Tensor linear_act_op(const Tensor& x, const Tensor& weight, const Tensor& bias,
                     LinearActivation act) {
  return linear_act_body(x, weight, bias, act);
}

Tensor linear_op(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_act_body(x, weight, bias, LinearActivation::None);
}

Tensor linear_act_linear_op(const Tensor& x, const Tensor& w1, const Tensor& b1,
                            LinearActivation act, const Tensor& w2, const Tensor& b2) {
  const Layer l1 = check_layer("linear_act_linear", x, w1, b1);
  MT_CHECK(is_floating(x.dtype()), "linear_act_linear: expected a floating input, got ", x.dtype());
  Tensor h = ops::empty_as(Shape{l1.rows, l1.out}, x);
  const bool record = autograd::needs_grad({&x, &w1, &b1, &w2, &b2});
  const Tensor aux = linear_forward_kernel(x.device())(h, l1.x2, w1, l1.bias1, act, record);
  const Layer l2 = check_layer("linear_act_linear", h, w2, b2);
  Tensor out2 = ops::empty_as(Shape{l2.rows, l2.out}, h);
  linear_forward_kernel(x.device())(out2, h, w2, l2.bias1, LinearActivation::None, false);
  Shape out_shape = l1.out_shape;
  out_shape[out_shape.size() - 1] = l2.out;
  Tensor out =
      x.dim() == 2 ? out2 : detail::make_view(out2, out_shape, contiguous_strides(out_shape), 0);
  if (!record) return out;

  Recorder rec{"LinearActLinearBackward0", {&x, &w1, &b1, &w2, &b2}};
  // d/dx alone reads w1: without it, an update of w1 before backward is no error.
  rec.save(l1.x2).save(x.requires_grad() ? w1 : Tensor()).save(h).save(w2).save(aux);
  rec.finish(
      out,
      [rows = l1.rows, n2 = l2.out, act, b1_vec = l1.bias_is_vector, b2_vec = l2.bias_is_vector,
       x_shape = x.shape(), b1_shape = b1.defined() ? b1.shape() : Shape{},
       b2_shape = b2.defined() ? b2.shape() : Shape{}](BackwardContext& ctx) -> Grads {
        const Tensor x2 = ctx.saved(0), h = ctx.saved(2), w2 = ctx.saved(3);
        Tensor g = ctx.grad();
        if (g.dim() != 2) g = g.reshape(Shape{rows, n2});
        Tensor gx, gw1, gb1, gw2, gb2;
        weight_and_bias_grads(ctx, 3, 4, g, h, b2_vec, b2_shape, gw2, gb2);
        if (ctx.needs(0) || ctx.needs(1) || ctx.needs(2)) {
          // The hidden layer's pre-activation gradient, with b1's gradient from the same pass.
          const Tensor gz = ops::empty_as(h.shape(), h);
          const bool fused_b1 = ctx.needs(2) && b1_vec;
          const Tensor gb1_vec =
              fused_b1 ? empty(Shape{h.size(1)}, TensorOptions(h.device()).dtype(h.dtype()))
                       : Tensor();
          linear_backward_act_kernel(g.device())(gz, gb1_vec, g, w2, h, ctx.saved(4), act);
          if (fused_b1) {
            gb1 = gb1_vec;
          } else if (ctx.needs(2)) {
            gb1 = autograd::sum_to(gz, b1_shape);
          }
          if (ctx.needs(1)) {
            gw1 = empty(Shape{h.size(1), x2.size(1)}, TensorOptions(h.device()).dtype(h.dtype()));
            linear_backward_weight_kernel(g.device())(gw1, Tensor(), gz, x2);
          }
          if (ctx.needs(0)) gx = input_grad(gz, ctx.saved(1), x_shape);
        }
        return {gx, gw1, gb1, gw2, gb2};
      });
  return out;
}

}  // namespace mantissa
