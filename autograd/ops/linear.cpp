// linear, linear_act and linear_act_linear: x [*, in] is folded into one [rows, in] matrix and
// every product runs on the fused linear kernels (engine/kernel_tables.h), so on CUDA the bias
// and activation ride in cuBLASLt epilogues and the bias gradient in the weight-gradient GEMM.
// Backward formulas run kernels directly: the autograd engine runs every backward without
// recording (there is no create_graph), so they need not be differentiable themselves.
#include <array>
#include <optional>

#include "autograd/autocast_seam.h"
#include "autograd/linear_act.h"
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

// An operand of a layer: its input, weight or bias. Under autocast a layer may round a float32
// operand to the autocast dtype itself (autograd/autocast_seam.h): input() is what the node
// records (the caller's tensor) and value() what the kernels read: on the CPU the float32 tensor
// itself, which the kernels round as they read it (engine/kernel_tables.h), elsewhere a rounded
// copy. `dtype` is the layer's dtype the operand stands for; gradients are made in value's
// dtype. Outside autocast both are the caller's tensor, referred to, not copied.
struct Operand {
  const Tensor* given = nullptr;  // the caller's tensor
  Tensor cast;                    // autocast's cast, or the rounded copy of a direct cast
  bool input_is_cast = false;     // autocast's cast: the node records it
  DType dtype = DType::Float32;
  std::optional<DType> direct;  // a weight rounded by the layer, to register with autocast
  const Tensor& value() const { return cast.defined() ? cast : *given; }
  const Tensor& input() const { return input_is_cast ? cast : *given; }

  // The tensor as it is.
  static Operand of(const Tensor& t) {
    Operand o;
    o.given = &t;
    if (t.defined()) o.dtype = t.dtype();
    return o;
  }
  // Through autocast's own cast (cast_input), when it casts.
  void cast_by_autocast() {
    if (Tensor c = autocast::cast_input(OpId::linear, *given); !c.is_same(*given)) {
      dtype = c.dtype();
      cast = std::move(c);
      input_is_cast = true;
    }
  }
};

// The checked operands of one linear layer, with x folded to [rows, in].
struct Layer {
  Tensor x2;     // [rows, in] view or copy of x (not recorded)
  Tensor bias1;  // bias as an [out] vector (a stride-0 view for a broadcast bias), or undefined
  Shape out_shape;
  int64_t rows = 0, in = 0, out = 0;
  bool bias_is_vector = false;  // bias has shape [out]: its gradient is the column sums as is
};

Layer check_layer(const char* op, const Operand& xo, const Operand& w, const Operand& b) {
  const Tensor &x = xo.value(), &weight = w.value(), &bias = b.value();
  MT_CHECK(x.defined() && weight.defined(), op, ": expected defined input and weight");
  ops::check_same_device(op, x, weight);
  MT_CHECK(xo.dtype == w.dtype, op,
           ": expected input and weight to have the same dtype, but got: ", xo.dtype,
           " != ", w.dtype);
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
    MT_CHECK(b.dtype == xo.dtype, op, ": expected bias to have dtype ", xo.dtype, ", but got ",
             b.dtype);
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

Tensor fresh(const Shape& shape, const Tensor& like) {
  return empty(shape, TensorOptions(like.device()).dtype(like.dtype()));
}
Tensor fresh(const Shape& shape, const Operand& like) {
  return empty(shape, TensorOptions(like.value().device()).dtype(like.dtype));
}

// grad_w (and grad_b when wanted) from the pre-activation gradient g [rows, out] and x2.
// gw and gb are made in w_dtype and b_dtype (float32 for weights rounded by the CPU kernels).
void weight_and_bias_grads(BackwardContext& ctx, size_t w_index, size_t b_index, const Tensor& g,
                           const Tensor& x2, bool bias_is_vector, const Shape& bias_shape,
                           DType w_dtype, DType b_dtype, Tensor& gw, Tensor& gb) {
  const bool want_w = ctx.needs(w_index), want_b = ctx.needs(b_index);
  const auto opts = TensorOptions(g.device());
  // The sum kernel, and column sums that sum_to reduces further, are in g's dtype (rounded
  // there, as a cast bias's gradient is); the engine converts the gradient where it goes.
  const DType gb_dtype = want_w && bias_is_vector ? b_dtype : g.dtype();
  Tensor gb_vec = want_b ? empty(Shape{g.size(1)}, opts.dtype(gb_dtype)) : Tensor();
  if (want_w) {
    gw = empty(Shape{g.size(1), x2.size(1)}, opts.dtype(w_dtype));
    linear_backward_weight_kernel(g.device())(gw, gb_vec, g, x2);
  } else if (want_b) {
    sum_kernel(g.device())(detail::make_view(gb_vec, Shape{1, g.size(1)}, Shape{0, 1}, 0), g);
  }
  if (want_b) gb = bias_is_vector ? gb_vec : autograd::sum_to(gb_vec, bias_shape);
}

template <size_t N>
std::array<Operand, N> weight_operands(const std::array<const Tensor*, N>& weights) {
  std::array<Operand, N> out;
  for (size_t i = 0; i < N; ++i) out[i] = Operand::of(*weights[i]);
  if (!autocast_state::any_cast_enabled()) [[likely]]
    return out;
  std::array<std::optional<DType>, N> direct{};
  bool distinct = true;  // a weight passed twice goes through one shared cast instead
  for (size_t i = 0; i < N; ++i) {
    direct[i] = autocast::direct_cast_dtype(OpId::linear, *weights[i]);
    for (size_t j = 0; j < i; ++j)
      distinct = distinct && !(weights[i]->defined() && weights[i]->is_same(*weights[j]));
  }
  for (size_t i = 0; i < N; ++i) {
    const Tensor& w = *weights[i];
    Operand& o = out[i];
    if (direct[i] && distinct) {
      o.dtype = *direct[i];
      o.direct = direct[i];
      if (!w.device().is_cpu()) {
        autograd::NoGradGuard no_grad;
        o.cast = w.to(*direct[i]);
      }
    } else {
      o.cast_by_autocast();
    }
  }
  return out;
}

// dx = g [rows, out] @ w [out, in], shaped like x. On the CPU straight into a fresh [rows, in]
// through the act-None form of the fused kernel: no mm op with its operand views and checks, and
// a float32 weight is read rounded like in the forward.
Tensor input_grad(const Tensor& g, const Tensor& w, const Shape& x_shape) {
  Tensor gx;
  if (g.device().is_cpu()) {
    gx = fresh(Shape{g.size(0), w.size(1)}, g);
    linear_backward_act_kernel(g.device())(gx, Tensor(), g, w, Tensor(), Tensor(),
                                           LinearActivation::None);
  } else {
    gx = mm(g, w);
  }
  return x_shape.size() == 2 ? gx : gx.reshape(x_shape);
}

// The layer's input x: on the CPU a float32 activation autocast would lower is rounded by the
// kernels as they read it (like a weight, but never cached or shared).
Operand input_operand(const Tensor& x) {
  Operand o = Operand::of(x);
  if (!autocast_state::any_cast_enabled()) [[likely]]
    return o;
  if (x.device().is_cpu()) {
    if (const auto dt = autocast::direct_lower_dtype(OpId::linear, x)) {
      o.dtype = *dt;
      return o;
    }
  }
  o.cast_by_autocast();
  return o;
}

// After recording: lets a later cast of a directly rounded weight share its gradient path.
template <size_t N>
void register_direct_casts(const Tensor& out, const std::array<Operand, N>& ops,
                           uint32_t first_input) {
  std::shared_ptr<autograd::Node> node;
  for (size_t i = 0; i < N; ++i) {
    if (!ops[i].direct) continue;
    if (!node) node = out.grad_fn();
    autocast::register_direct_cast(ops[i].input(), *ops[i].direct, node,
                                   first_input + static_cast<uint32_t>(i));
  }
}

}  // namespace

Tensor linear_act(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in,
                  LinearActivation act) {
  const Operand xo = input_operand(x_in);
  const Tensor& x = xo.value();
  const Tensor& x_input = xo.input();
  const auto params = weight_operands<2>({&weight_in, &bias_in});
  const Tensor &weight = params[0].value(), &bias = params[1].value();
  const Tensor &weight_input = params[0].input(), &bias_input = params[1].input();
  const Layer l = check_layer("linear", xo, params[0], params[1]);
  MT_CHECK(act == LinearActivation::None || is_floating(xo.dtype), "linear: activation ",
           act_name(act), " needs a floating input, got ", xo.dtype);

  Tensor out2 = fresh(Shape{l.rows, l.out}, xo);
  const bool record =
      is_floating(xo.dtype) && autograd::needs_grad({&x_input, &weight_input, &bias_input});
  // GeluTanh's backward reads the pre-activation (aux); ReLU's reads the output.
  const Tensor pre = linear_forward_kernel(x.device())(out2, l.x2, weight, l.bias1, act,
                                                       record && act == LinearActivation::GeluTanh);
  Tensor out = x.dim() == 2
                   ? out2
                   : detail::make_view(out2, l.out_shape, contiguous_strides(l.out_shape), 0);
  if (!record) return out;

  Recorder rec{act == LinearActivation::None ? "LinearBackward0" : "LinearActBackward0",
               {&x_input, &weight_input, &bias_input}};
  // d/dW reads x and d/dx reads W: a frozen weight does not keep the input alive.
  rec.save(weight_input.requires_grad() ? l.x2 : Tensor())
      .save(x_input.requires_grad() ? weight : Tensor())
      .save(act == LinearActivation::Relu ? out2 : pre);
  rec.finish(
      out,
      [l_rows = l.rows, l_out = l.out, act, bias_is_vector = l.bias_is_vector, x_shape = x.shape(),
       bias_shape = bias.defined() ? bias.shape() : Shape{}, w_dtype = weight.dtype(),
       b_dtype = bias.defined() ? bias.dtype() : weight.dtype()](BackwardContext& ctx) -> Grads {
        const Tensor x2 = ctx.saved(0), w = ctx.saved(1);
        Tensor g = ctx.grad();
        if (g.dim() != 2) g = g.reshape(Shape{l_rows, l_out});
        Tensor gx, gw, gb;
        if (act != LinearActivation::None) {
          const Tensor gz = fresh(g.shape(), g);
          (act == LinearActivation::Relu ? relu_backward_kernel : gelu_tanh_backward_kernel)(
              g.device())(gz, g, ctx.saved(2));
          g = gz;
        }
        weight_and_bias_grads(ctx, 1, 2, g, x2, bias_is_vector, bias_shape, w_dtype, b_dtype, gw,
                              gb);
        if (ctx.needs(0)) gx = input_grad(g, w, x_shape);
        return {gx, gw, gb};
      });
  register_direct_casts(out, params, 1);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return linear_act(x, weight, bias, LinearActivation::None);
}

Tensor linear_act_linear(const Tensor& x_in, const Tensor& w1_in, const Tensor& b1_in,
                         LinearActivation act, const Tensor& w2_in, const Tensor& b2_in) {
  const Operand xo = input_operand(x_in);
  const Tensor& x = xo.value();
  const Tensor& x_input = xo.input();
  const auto params = weight_operands<4>({&w1_in, &b1_in, &w2_in, &b2_in});
  const Tensor &w1 = params[0].value(), &b1 = params[1].value(), &w2 = params[2].value(),
               &b2 = params[3].value();
  const Layer l1 = check_layer("linear_act_linear", xo, params[0], params[1]);
  MT_CHECK(is_floating(xo.dtype), "linear_act_linear: expected a floating input, got ", xo.dtype);
  Tensor h = fresh(Shape{l1.rows, l1.out}, xo);
  const bool record = autograd::needs_grad(
      {&x_input, &params[0].input(), &params[1].input(), &params[2].input(), &params[3].input()});
  const Tensor aux = linear_forward_kernel(x.device())(h, l1.x2, w1, l1.bias1, act, record);
  const Layer l2 = check_layer("linear_act_linear", Operand::of(h), params[2], params[3]);
  Tensor out2 = fresh(Shape{l2.rows, l2.out}, h);
  linear_forward_kernel(x.device())(out2, h, w2, l2.bias1, LinearActivation::None, false);
  Shape out_shape = l1.out_shape;
  out_shape[out_shape.size() - 1] = l2.out;
  Tensor out =
      x.dim() == 2 ? out2 : detail::make_view(out2, out_shape, contiguous_strides(out_shape), 0);
  if (!record) return out;

  Recorder rec{
      "LinearActLinearBackward0",
      {&x_input, &params[0].input(), &params[1].input(), &params[2].input(), &params[3].input()}};
  // d/dx alone reads w1: without it, an update of w1 before backward is no error.
  rec.save(l1.x2).save(x_input.requires_grad() ? w1 : Tensor()).save(h).save(w2).save(aux);
  rec.finish(
      out,
      [rows = l1.rows, n2 = l2.out, act, b1_vec = l1.bias_is_vector, b2_vec = l2.bias_is_vector,
       x_shape = x.shape(), b1_shape = b1.defined() ? b1.shape() : Shape{},
       b2_shape = b2.defined() ? b2.shape() : Shape{},
       // The gradients' dtypes: float32 for weights the CPU kernels round themselves.
       dt = std::array<DType, 4>{w1.dtype(), b1.defined() ? b1.dtype() : w1.dtype(), w2.dtype(),
                                 b2.defined() ? b2.dtype() : w2.dtype()}](
          BackwardContext& ctx) -> Grads {
        const Tensor x2 = ctx.saved(0), h = ctx.saved(2), w2 = ctx.saved(3);
        Tensor g = ctx.grad();
        if (g.dim() != 2) g = g.reshape(Shape{rows, n2});
        Tensor gx, gw1, gb1, gw2, gb2;
        weight_and_bias_grads(ctx, 3, 4, g, h, b2_vec, b2_shape, dt[2], dt[3], gw2, gb2);
        if (ctx.needs(0) || ctx.needs(1) || ctx.needs(2)) {
          // The hidden layer's pre-activation gradient, with b1's gradient from the same pass.
          const Tensor gz = fresh(h.shape(), h);
          const bool fused_b1 = ctx.needs(2) && b1_vec;
          const Tensor gb1_vec =
              fused_b1 ? empty(Shape{h.size(1)}, TensorOptions(h.device()).dtype(dt[1])) : Tensor();
          linear_backward_act_kernel(g.device())(gz, gb1_vec, g, w2, h, ctx.saved(4), act);
          if (fused_b1) {
            gb1 = gb1_vec;
          } else if (ctx.needs(2)) {
            gb1 = autograd::sum_to(gz, b1_shape);
          }
          if (ctx.needs(1)) {
            gw1 = empty(Shape{h.size(1), x2.size(1)}, TensorOptions(h.device()).dtype(dt[0]));
            linear_backward_weight_kernel(g.device())(gw1, Tensor(), gz, x2);
          }
          if (ctx.needs(0)) gx = input_grad(gz, ctx.saved(1), x_shape);
        }
        return {gx, gw1, gb1, gw2, gb2};
      });
  register_direct_casts(out, params, 1);
  return out;
}

}  // namespace mantissa
