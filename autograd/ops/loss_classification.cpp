// The class losses, one node each: nll_loss and cross_entropy, with class weights,
// ignore_index and label smoothing as PyTorch's. Forwards call the elementwise, reduction and
// log_softmax kernels directly; backward formulas are written with the differentiable ops, so
// they record under create_graph. Without class weights each performs the roundings of the
// composition it stands for (log_softmax, where, sum, mul, div for cross_entropy), which the
// fp32 golden trajectories are pinned to. Both take autocast's float32 policy.
#include <limits>

#include "autograd/ops/loss_common.h"

namespace mantissa {
namespace {

using namespace loss_detail;

// ---- class-index targets (nll_loss, cross_entropy) --------------------------------------------
// nll_loss over class dim 1 of lp [N, C, d...] (an unbatched [C] input comes as [1, C]).
struct Picked {
  Tensor hit;     // bool, lp's shape: the elements each loss reads (its gradient's support)
  Tensor weight;  // [N, d...] in lp's dtype: the target's class weight (1 without class
                  // weights), 0 for an ignored target, NaN for one out of range
  Tensor loss;    // [N, d...]: (0 - lp at the target) * weight
};

// Class weights [C] checked and shaped [1, C, 1...] (or [C]) to broadcast against an input
// whose class dim is `class_dim`; undefined without.
Tensor class_weight_view(const char* op, const Tensor& weight, const Tensor& input,
                         int64_t class_dim) {
  if (!weight.defined()) return weight;
  check_weight(op, "weight", weight);
  ops::check_same_device(op, input, weight);
  const int64_t classes = input.size(class_dim);
  MT_CHECK(weight.dim() == 1 && weight.size(0) == classes, op,
           ": weight should be defined for all ", classes, " classes, got weight of shape ",
           weight.shape());
  Shape view(input.dim(), 1);
  view[class_dim] = classes;
  return converted(weight, input.dtype()).reshape(view);
}

// A class loss's input as batched log-probabilities lp [N, C, d...] (an unbatched [C] input
// becomes [1, C]) and its target as int64 [N, d...], checked against lp.
struct Batched {
  Tensor lp, tg;
  bool unbatched;
};
Batched batched(const char* op, const Tensor& logp, const Tensor& target,
                const Shape& input_shape) {
  MT_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, op,
           ": expected class index target of dtype int64, got ", target.dtype());
  ops::check_same_device(op, logp, target);
  Batched b;
  b.unbatched = logp.dim() == 1;
  {
    autograd::NoGradGuard no_grad;
    b.lp = b.unbatched ? logp.unsqueeze(0) : logp;
  }
  b.tg = (b.unbatched ? target.reshape({1}) : target).to(kInt64);
  Shape expected = b.lp.shape();
  expected.erase(1);
  MT_CHECK(b.tg.shape() == expected, op, ": expected target of shape ", expected,
           " for input of shape ", input_shape, ", got ", target.shape());
  return b;
}

// w: class weights as class_weight_view gives them, or undefined.
Picked pick(const Tensor& lp, const Tensor& tg, int64_t ignore_index, const Tensor& w) {
  autograd::NoGradGuard no_grad;
  const int64_t classes = lp.size(1);
  const Tensor valid = tg != ignore_index;
  // On a GPU an out-of-range target makes its loss element and weight NaN instead of an error,
  // which reaches the reduced loss and, through backward, the gradients, where a GradScaler skips
  // the step. PyTorch stops the process with a device-side assert instead; a library must not.
  check_class_targets("nll_loss", tg, classes, ignore_index);
  // The target's log-probability is picked by comparing the target with every class index, not
  // with gather: CUDA gather reads its index-bounds flag back to the host after each call. The
  // sum adds zeros to one value, so it is exact. An ignored target picks 0 (weight 0, so 0 - 0
  // gives +0, not -0). An out-of-range target picks its whole row and gets weight NaN, so the
  // NaN also reaches that row's gradient rather than stopping at an empty pick.
  Shape class_shape(lp.dim(), 1);
  class_shape[1] = classes;
  const Tensor class_index =
      arange(classes, TensorOptions(lp.device()).dtype(kInt64)).reshape(class_shape);
  const Tensor out_of_range = valid & !((tg >= 0) & (tg < classes));
  Picked p;
  p.hit = (tg.unsqueeze(1) == class_index) | out_of_range.unsqueeze(1);
  const Tensor zero = scalar_like(0.0, lp);
  const Tensor picked = reduce_k(sum_kernel, where_k(p.hit, lp, zero), 1);
  p.weight = where_k(!out_of_range, valid.to(lp.dtype()),
                     scalar_like(std::numeric_limits<double>::quiet_NaN(), lp));
  if (w.defined()) {
    // The target's weight, picked as its log-probability is (an out-of-range target's is NaN
    // already).
    const Tensor target_weight = reduce_k(sum_kernel, where_k(p.hit, w, zero), 1);
    p.weight = ops::run_binary_same(mul_kernel, p.weight, target_weight);
  }
  p.loss = ops::run_binary_same(mul_kernel, add_k(zero, picked, -1.0), p.weight);
  return p;
}

// The gradient w.r.t. lp of the picked losses, given the gradient g of `loss` ([N, d...]).
Tensor pick_backward(const Tensor& g, const Tensor& hit, const Tensor& weight) {
  return where(hit, (-(g * weight)).unsqueeze(1), 0.0);
}

}  // namespace

// ---- class losses -------------------------------------------------------------------------------
Tensor nll_loss_op(const Tensor& logp, const Tensor& target, Reduction reduction,
                   int64_t ignore_index, const Tensor& weight) {
  MT_CHECK(logp.dim() >= 1, "nll_loss: input must have at least 1 dimension");
  check_floating("nll_loss", logp);
  // Unbatched [C] input with a 0-d target, or class dim 1 of [N, C, d1, ...].
  const auto [lp, tg, unbatched] = batched("nll_loss", logp, target, logp.shape());
  const Picked p = pick(lp, tg, ignore_index, class_weight_view("nll_loss", weight, lp, 1));
  const Tensor loss = unbatched ? p.loss.reshape(Shape{}) : p.loss;
  // Mean divides by the weights' sum: the targets that count, each by its class weight.
  const Tensor weight_sum =
      reduction == Reduction::Mean ? reduce_k(sum_kernel, p.weight) : Tensor();
  const Tensor out = reduction == Reduction::Mean
                         ? ops::run_binary_same(div_kernel, reduce_k(sum_kernel, loss), weight_sum)
                         : reduce_loss(loss, reduction);
  if (Recorder rec{"NllLossBackward0", {&logp}}) {
    rec.save(p.hit).save(p.weight).save(weight_sum);
    rec.finish(
        out,
        [reduction, shape = logp.shape()](BackwardContext& ctx) -> Grads {
          const Tensor weight = ctx.saved(1);
          const Tensor g = reduction == Reduction::Mean
                               ? (ctx.grad() / ctx.saved(2)).expand(weight.shape())
                               : elementwise_grad(ctx.grad(), reduction, weight.shape());
          const Tensor grad = pick_backward(g, ctx.saved(0), weight);
          return {grad.shape() == shape ? grad : grad.reshape(shape)};
        },
        autograd::DoubleBackward::Supported);
  }
  return out;
}

Tensor cross_entropy_op(const Tensor& x, const Tensor& target, Reduction reduction,
                        double label_smoothing, int64_t ignore_index, const Tensor& weight) {
  check_floating("cross_entropy", x);
  MT_CHECK(x.dim() >= 1, "cross_entropy: input must have at least 1 dimension");
  MT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  const bool probabilities = is_floating(target.dtype());
  // Probabilities of another dtype promote the input, as logp * target would.
  Tensor input;
  {
    autograd::NoGradGuard no_grad;
    input = probabilities ? x.to(result_type(x, target)) : x;
  }
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const int64_t classes = input.size(class_dim);
  const double ls = label_smoothing;
  Tensor logp = ops::empty_as(input.shape(), input);
  log_softmax_kernel(input.device())(logp, input, class_dim);

  if (probabilities) {
    MT_CHECK(target.shape() == input.shape(), "cross_entropy: probability target of shape ",
             target.shape(), " must match the input shape ", input.shape());
    ops::check_same_device("cross_entropy", input, target);
    Tensor t;
    {
      autograd::NoGradGuard no_grad;
      t = target.to(input.dtype());
    }
    if (ls > 0.0) {
      t = add_k(ops::run_binary_same(mul_kernel, t, scalar_like(1.0 - ls, t)),
                scalar_like(ls / static_cast<double>(classes), t));
    }
    // Class weights scale each class's term; the mean still divides by the number of
    // distributions, as PyTorch's does for probability targets.
    Tensor w;
    if (weight.defined()) {
      w = class_weight_view("cross_entropy", weight, input, class_dim);
      t = ops::run_binary_same(mul_kernel, t, broadcast_view(w, t.shape()));
    }
    const Tensor loss = ops::run_unary(
        neg_kernel, reduce_k(sum_kernel, ops::run_binary_same(mul_kernel, logp, t), class_dim));
    const Tensor out = reduce_loss(loss, reduction);
    if (Recorder rec{"CrossEntropyLossBackward0", {&x, &target}}) {
      rec.save(logp).save(t).save(w);
      rec.finish(
          out, [reduction, ls, class_dim, shape = loss.shape()](BackwardContext& ctx) -> Grads {
            const Tensor logp = ctx.saved(0), t = ctx.saved(1), w = ctx.saved(2);
            // -sum(logp * t) over the class dim, t = (target (1 - ls) + ls / classes) w.
            const Tensor g = (-elementwise_grad(ctx.grad(), reduction, shape)).unsqueeze(class_dim);
            Grads grads(2);
            if (ctx.needs(0)) {
              const Tensor g_logp = g * t;
              grads[0] = ops::empty_as(logp.shape(), logp);
              log_softmax_backward_kernel(logp.device())(grads[0], g_logp, logp, class_dim);
            }
            if (ctx.needs(1)) {
              grads[1] = ls > 0.0 ? g * logp * (1.0 - ls) : g * logp;
              if (w.defined()) grads[1] = grads[1] * w;
            }
            return grads;
          });
    }
    return out;
  }

  const auto [lp, tg, unbatched] = batched("cross_entropy", logp, target, input.shape());
  const Tensor w = class_weight_view("cross_entropy", weight, lp, 1);
  const Picked p = pick(lp, tg, ignore_index, w);
  Tensor loss = p.loss;
  Tensor valid;  // the targets that count, in logp's dtype
  if (ls > 0.0 || reduction == Reduction::Mean) {
    autograd::NoGradGuard no_grad;
    valid = (tg != ignore_index).to(lp.dtype());
  }
  if (ls > 0.0) {
    // The uniform part: -sum(logp) / classes for each target that counts (each class's term
    // scaled by its weight).
    const Tensor weighted_lp =
        w.defined() ? ops::run_binary_same(mul_kernel, lp, broadcast_view(w, lp.shape())) : lp;
    const Tensor smooth = ops::run_binary_same(
        mul_kernel,
        ops::run_binary_same(div_kernel,
                             ops::run_unary(neg_kernel, reduce_k(sum_kernel, weighted_lp, 1)),
                             scalar_like(static_cast<double>(classes), lp)),
        valid);
    loss = add_k(ops::run_binary_same(mul_kernel, loss, scalar_like(1.0 - ls, lp)),
                 ops::run_binary_same(mul_kernel, smooth, scalar_like(ls, lp)));
  }
  // Mean divides by the weights of the targets that count (their number without class weights).
  const Tensor valid_sum = reduction == Reduction::Mean
                               ? reduce_k(sum_kernel, w.defined() ? p.weight : valid)
                               : Tensor();
  const Tensor out = reduction == Reduction::Mean
                         ? ops::run_binary_same(div_kernel, reduce_k(sum_kernel, loss), valid_sum)
                         : reduce_loss(unbatched ? loss.reshape(Shape{}) : loss, reduction);
  if (Recorder rec{"CrossEntropyLossBackward0", {&x}}) {
    rec.save(logp).save(p.hit).save(p.weight).save(valid).save(valid_sum).save(w);
    rec.finish(out, [reduction, ls, classes, class_dim](BackwardContext& ctx) -> Grads {
      const Tensor logp = ctx.saved(0), hit = ctx.saved(1), weight = ctx.saved(2);
      const Tensor g = reduction == Reduction::Mean
                           ? (ctx.grad() / ctx.saved(4)).expand(weight.shape())
                           : elementwise_grad(ctx.grad(), reduction, weight.shape());
      Tensor g_lp = pick_backward(ls > 0.0 ? g * (1.0 - ls) : g, hit, weight);
      if (ls > 0.0) {
        const Tensor g_uniform = -(g * ls * ctx.saved(3) / static_cast<double>(classes));
        const Tensor w = ctx.saved(5);
        g_lp =
            g_lp +
            (w.defined() ? g_uniform.unsqueeze(1) * w : g_uniform.unsqueeze(1)).expand(hit.shape());
      }
      Tensor grad = ops::empty_as(logp.shape(), logp);
      log_softmax_backward_kernel(logp.device())(grad, g_lp.reshape(logp.shape()), logp, class_dim);
      return {grad};
    });
  }
  return out;
}

}  // namespace mantissa
