// The losses of probabilities, one node each: binary_cross_entropy (of probabilities),
// binary_cross_entropy_with_logits and kl_div. Their element weights (weight, pos_weight) are
// constants of the loss, broadcast as in PyTorch.
#include <limits>

#include "autograd/ops/loss_common.h"

namespace mantissa {
namespace {

using namespace loss_detail;

// A weight broadcast against a loss of `shape`; PyTorch multiplies it in place (or expands it
// to the target), so it cannot grow the loss.
void check_weight_shape(const char* op, const char* what, const Tensor& w, const Shape& shape) {
  if (!w.defined()) return;
  bool fits = w.dim() <= shape.size();
  for (int64_t i = 1; fits && i <= w.dim(); ++i) {
    const int64_t size = w.size(-i);
    fits = size == 1 || size == shape[shape.size() - i];
  }
  MT_CHECK(fits, op, ": ", what, " of shape ", w.shape(),
           " does not broadcast to the loss's shape ", shape);
}

}  // namespace

Tensor binary_cross_entropy_op(const Tensor& input, const Tensor& target, Reduction reduction,
                               const Tensor& weight) {
  constexpr const char* op = "binary_cross_entropy";
  check_floating(op, input);
  MT_CHECK(target.shape() == input.shape(), op, ": target size (", target.shape(),
           ") must be the same as input size (", input.shape(), ")");
  ops::check_same_device(op, input, target);
  check_weight(op, "weight", weight);
  if (weight.defined()) ops::check_same_device(op, input, weight);
  check_weight_shape(op, "weight", weight, input.shape());
  const DType dtype = result_type(input, target);
  const Tensor x = converted(input, dtype), t = converted(target, dtype),
               w = converted(weight, dtype);
  // PyTorch checks the range on the host; on a GPU that would wait for the device, and a
  // probability outside [0, 1] makes its loss NaN anyway (log of a negative number).
  if (x.device().is_cpu() && x.numel() > 0) {
    autograd::NoGradGuard no_grad;
    MT_CHECK(amin(x).item<double>() >= 0.0 && amax(x).item<double>() <= 1.0, op,
             ": all elements of input should be between 0 and 1");
  }
  Tensor loss;
  {
    // (t - 1) max(log(1 - x), -100) - t max(log(x), -100): the clamp keeps the loss finite
    // where a probability is exactly 0 or 1.
    autograd::NoGradGuard no_grad;
    const Tensor floor = scalar_like(-100.0, x);
    loss = (t - 1.0) * maximum(log1p(-x), floor) - t * maximum(log(x), floor);
    if (w.defined()) loss = loss * w;
  }
  const Tensor out = reduce_loss(loss, reduction);
  if (Recorder rec{"BinaryCrossEntropyBackward0", {&input, &target}}) {
    rec.save(x).save(t).save(w);
    rec.finish(out, [reduction, shape = input.shape()](BackwardContext& ctx) -> Grads {
      const Tensor x = ctx.saved(0), t = ctx.saved(1), w = ctx.saved(2);
      Tensor g = elementwise_grad(ctx.grad(), reduction, shape);
      if (w.defined()) g = g * w;
      Grads grads(2);
      // PyTorch's: (x - t) / max((1 - x) x, eps) for the input, -logit(x) for the target; its eps
      // is the float 1e-12, widened.
      if (ctx.needs(0)) {
        grads[0] =
            g * (x - t) / maximum((1.0 - x) * x, scalar_like(static_cast<double>(1e-12f), x));
      }
      if (ctx.needs(1)) grads[1] = g * -log(x / (1.0 - x));
      return grads;
    });
  }
  return out;
}

Tensor binary_cross_entropy_with_logits_op(const Tensor& input, const Tensor& target,
                                           Reduction reduction, const Tensor& pos_weight,
                                           const Tensor& weight) {
  constexpr const char* op = "binary_cross_entropy_with_logits";
  check_floating(op, input);
  MT_CHECK(target.shape() == input.shape(), op, ": target size (", target.shape(),
           ") must be the same as input size (", input.shape(), ")");
  ops::check_same_device(op, input, target);
  DType dtype = result_type(input, target);
  Shape shape = input.shape();
  if (pos_weight.defined()) {
    ops::check_same_device(op, input, pos_weight);
    dtype = promote_types(dtype, pos_weight.dtype());
    shape = broadcast_shapes(shape, pos_weight.shape(), op);
  }
  check_weight(op, "weight", weight);
  if (weight.defined()) ops::check_same_device(op, input, weight);
  check_weight_shape(op, "weight", weight, shape);
  Tensor x, t, pw;
  {
    autograd::NoGradGuard no_grad;
    x = input.to(dtype);
    t = target.to(dtype);
    if (pos_weight.defined()) pw = pos_weight.to(dtype);
  }
  const Tensor w = converted(weight, dtype);
  // log(1 + exp(-|x|)) + max(-x, 0) is log(1 + exp(-x)) without overflow.
  const Tensor zero = scalar_like(0.0, x), one = scalar_like(1.0, x);
  const Tensor neg_x = ops::run_unary(neg_kernel, x);
  const Tensor neg_abs = ops::run_unary(neg_kernel, ops::run_unary(abs_kernel, x));
  const Tensor softplus_neg =
      add_k(ops::run_unary(log1p_kernel, ops::run_unary(exp_kernel, neg_abs)),
            ops::run_binary_same(maximum_kernel, neg_x, zero));
  const Tensor linear = ops::run_binary_same(mul_kernel, add_k(one, t, -1.0), x);
  Tensor loss;
  if (pw.defined()) {
    const Tensor log_weight = add_k(ops::run_binary_same(mul_kernel, add_k(pw, one, -1.0), t), one);
    loss = add_k(linear, ops::run_binary_same(mul_kernel, log_weight, softplus_neg));
  } else {
    loss = add_k(linear, softplus_neg);
  }
  if (w.defined()) loss = ops::run_binary_same(mul_kernel, loss, broadcast_view(w, shape));
  const Tensor out = reduce_loss(loss, reduction);
  if (Recorder rec{"BinaryCrossEntropyWithLogitsBackward0", {&input, &target, &pos_weight}}) {
    rec.save(x).save(t).save(pw).save(w);
    rec.finish(
        out,
        [reduction, shape, sx = input.shape(),
         sw = pos_weight.defined() ? pos_weight.shape() : Shape{}](BackwardContext& ctx) -> Grads {
          const Tensor x = ctx.saved(0), t = ctx.saved(1), pw = ctx.saved(2);
          Tensor g = elementwise_grad(ctx.grad(), reduction, shape);
          if (ctx.saved(3).defined()) g = g * ctx.saved(3);
          // loss = (1 - t) x + w softplus(-x) with w = 1 + (pw - 1) t, and softplus(-x)' =
          // -sigmoid(-x) everywhere (the stable form's kinks at x = 0 cancel).
          const Tensor w = pw.defined() ? (pw - 1.0) * t + 1.0 : Tensor();
          const Tensor sig = sigmoid(-x);
          Grads grads(3);
          if (ctx.needs(0)) grads[0] = sum_to(g * ((1.0 - t) - (w.defined() ? w * sig : sig)), sx);
          if (ctx.needs(1) || ctx.needs(2)) {
            const Tensor softplus_neg = log1p(exp(-abs(x))) + maximum(-x, zeros_like(x));
            if (ctx.needs(1)) {
              grads[1] = sum_to(g * (pw.defined() ? (pw - 1.0) * softplus_neg - x : -x), sx);
            }
            if (ctx.needs(2)) grads[2] = sum_to(g * t * softplus_neg, sw);
          }
          return grads;
        });
  }
  return out;
}

// PyTorch's kl_div, pointwise: exp(t) (t - x) for log-probability targets, else
// xlogy(t, t) - t x (0 where t is 0).
Tensor kl_div_op(const Tensor& input, const Tensor& target, KlDivReduction reduction,
                 bool log_target) {
  constexpr const char* op = "kl_div";
  check_floating(op, input);
  ops::check_same_device(op, input, target);
  const DType dtype = result_type(input, target);
  const Tensor x = converted(input, dtype), t = converted(target, dtype);
  const Shape shape = broadcast_shapes(input.shape(), target.shape(), op);
  Tensor loss;
  {
    autograd::NoGradGuard no_grad;
    loss = log_target ? exp(t) * (t - x) : where(t != 0.0, t * log(t), 0.0) - t * x;
  }
  // batchmean divides the sum by the batch size, input.size(0) (1 for a 0-d input).
  const double batch = input.dim() > 0 ? static_cast<double>(input.size(0)) : 1.0;
  Tensor out;
  switch (reduction) {
    case KlDivReduction::None:
      out = loss;
      break;
    case KlDivReduction::Sum:
      out = reduce_k(sum_kernel, loss);
      break;
    case KlDivReduction::Mean:
      out = reduce_k(mean_kernel, loss);
      break;
    case KlDivReduction::BatchMean:
      out = ops::run_binary_same(div_kernel, reduce_k(sum_kernel, loss), scalar_like(batch, loss));
      break;
  }
  if (Recorder rec{"KlDivBackward0", {&input, &target}}) {
    rec.save(x).save(t);
    rec.finish(out,
               [reduction, log_target, batch, shape, sx = input.shape(),
                st = target.shape()](BackwardContext& ctx) -> Grads {
                 const Tensor x = ctx.saved(0), t = ctx.saved(1);
                 const Tensor g =
                     reduction == KlDivReduction::None
                         ? elementwise_grad(ctx.grad(), Reduction::None, shape)
                     : reduction == KlDivReduction::BatchMean
                         ? (ctx.grad() / batch).expand(shape)
                         : elementwise_grad(
                               ctx.grad(),
                               reduction == KlDivReduction::Sum ? Reduction::Sum : Reduction::Mean,
                               shape);
                 Grads grads(2);
                 const Tensor et = log_target ? exp(t) : Tensor();
                 if (ctx.needs(0)) grads[0] = sum_to(-(g * (log_target ? et : t)), sx);
                 if (ctx.needs(1)) {
                   // xlogy(t, t)' = log(t) + t / t, with xlogy(0, t) = 0: NaN at t = 0, as
                   // PyTorch's.
                   const Tensor dt =
                       log_target ? et * (t - x) + et : where(t != 0.0, log(t), 0.0) + t / t - x;
                   grads[1] = sum_to(g * dt, st);
                 }
                 return grads;
               });
  }
  return out;
}

}  // namespace mantissa
