// The losses, one node each: mse_loss, l1_loss, nll_loss, cross_entropy and
// binary_cross_entropy_with_logits. Forwards call the elementwise, reduction and log_softmax
// kernels directly; backward formulas are written with the differentiable ops, so they record
// under create_graph.
//
// Each performs the same roundings, in the same order, as the composition of elementwise ops and
// reductions it stands for (sub, mul, sum/mean for mse_loss; log_softmax, where, sum, mul, div for
// cross_entropy), forward and backward, so values and gradients equal that composition's bit for
// bit: the fp32 golden trajectories are pinned to it. All take autocast's float32 policy.
#include <limits>
#include <optional>

#include "autograd/autocast_wrapper.h"
#include "autograd/ops/elementwise_common.h"
#include "engine/logging.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using autograd::sum_to;
using Grads = std::vector<Tensor>;
using ops::broadcast_view;

// ---- forward arithmetic: kernels on operands of one dtype and device, recording nothing -------
Tensor scalar_like(double v, const Tensor& like) {
  return ops::wrap_scalar(v, like.dtype(), like.device());
}

// a + alpha * b, broadcast (alpha -1 is sub's kernel call).
Tensor add_k(const Tensor& a, const Tensor& b, double alpha = 1.0) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "add");
  Tensor out = ops::empty_as(shape, a);
  add_kernel(a.device())(out, broadcast_view(a, shape), broadcast_view(b, shape), alpha);
  return out;
}

Tensor where_k(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Shape shape =
      broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  Tensor out = ops::empty_as(shape, a);
  where_kernel(a.device())(out, broadcast_view(cond, shape), broadcast_view(a, shape),
                           broadcast_view(b, shape));
  return out;
}

// sum or mean over `dim`, or over every dim (a 0-d result) when there is none.
Tensor reduce_k(const KernelTable<ReduceKernel>& kernel, const Tensor& x,
                std::optional<int64_t> dim = std::nullopt) {
  Shape keep = x.shape(), result;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!dim || d == *dim) {
      keep[d] = 1;
    } else {
      result.push_back(x.size(d));
    }
  }
  Tensor out = ops::empty_as(keep, x);
  kernel(x.device())(out, x);
  if (keep == result) return out;
  return detail::make_view(out, result, contiguous_strides(result), out.storage_offset());
}

Tensor reduce_loss(const Tensor& loss, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return reduce_k(sum_kernel, loss);
    case Reduction::Mean:
      return reduce_k(mean_kernel, loss);
  }
  return loss;
}

// The gradient of every element of a `shape`d loss from its reduction's gradient g: what the
// backwards of sum() and mean() produce.
Tensor elementwise_grad(const Tensor& g, Reduction reduction, const Shape& shape) {
  switch (reduction) {
    case Reduction::None:
      return g.shape() == shape ? g : g.reshape(shape);
    case Reduction::Sum:
      return g.expand(shape);
    case Reduction::Mean:
      return (g / static_cast<double>(shape.numel())).expand(shape);
  }
  return g;
}

void check_floating(const char* op, const Tensor& t) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating point input, got ", t.dtype());
}

// input and target of an elementwise loss in their common dtype (copies made without recording;
// the gradients come back in that dtype and the engine converts them for their inputs).
struct Pair {
  Tensor input, target;
  Shape shape;  // broadcast
};

Pair prepare_pair(const char* op, const Tensor& input, const Tensor& target) {
  check_floating(op, input);
  ops::check_same_device(op, input, target);
  if (!(input.shape() == target.shape())) {
    log().warn(
        "{}: using a target size ({}) that is different to the input size ({}); this will "
        "likely lead to incorrect results due to broadcasting",
        op, detail::str_cat(target.shape()), detail::str_cat(input.shape()));
  }
  const DType dtype = result_type(input, target);
  autograd::NoGradGuard no_grad;
  return {input.to(dtype), target.to(dtype), broadcast_shapes(input.shape(), target.shape(), op)};
}

// The formulas of mse_loss and l1_loss serve create_graph when they read the operands
// themselves: a cast made by prepare_pair is not recorded, so it has no history to go through.
autograd::DoubleBackward same_operands(const Pair& p, const Tensor& input, const Tensor& target) {
  return p.input.is_same(input) && p.target.is_same(target) ? autograd::DoubleBackward::Supported
                                                            : autograd::DoubleBackward::Unsupported;
}

// ---- class-index targets (nll_loss, cross_entropy) --------------------------------------------
// nll_loss over class dim 1 of lp [N, C, d...] (an unbatched [C] input comes as [1, C]).
struct Picked {
  Tensor hit;     // bool, lp's shape: the elements each loss reads (its gradient's support)
  Tensor weight;  // [N, d...] in lp's dtype: 1, 0 for an ignored target, NaN for one out of range
  Tensor loss;    // [N, d...]: (0 - lp at the target) * weight
};

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

Picked pick(const Tensor& lp, const Tensor& tg, int64_t ignore_index) {
  autograd::NoGradGuard no_grad;
  const int64_t classes = lp.size(1);
  const Tensor valid = tg != ignore_index;
  // Targets are range-checked here only where reading them costs no device sync (host memory).
  // On a GPU the loss must not wait for the device, so that a training step can be captured in a
  // CUDA graph: there an out-of-range target makes its loss element and weight NaN instead,
  // which reaches the reduced loss and, through backward, the gradients, where a GradScaler skips
  // the step. PyTorch stops the process with a device-side assert instead; a library must not.
  if (tg.device().is_cpu() && tg.numel() > 0) {
    const Tensor safe_target = where(valid, tg, zeros_like(tg));
    const int64_t lo = amin(safe_target).item<int64_t>(), hi = amax(safe_target).item<int64_t>();
    MT_CHECK(lo >= 0 && hi < classes, "nll_loss: target ", lo < 0 ? lo : hi,
             " is out of bounds for ", classes, " classes");
  }
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
  p.loss = ops::run_binary_same(mul_kernel, add_k(zero, picked, -1.0), p.weight);
  return p;
}

// The gradient w.r.t. lp of the picked losses, given the gradient g of `loss` ([N, d...]).
Tensor pick_backward(const Tensor& g, const Tensor& hit, const Tensor& weight) {
  return where(hit, (-(g * weight)).unsqueeze(1), 0.0);
}

// ---- elementwise losses -------------------------------------------------------------------------
Tensor mse_loss_body(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Pair p = prepare_pair("mse_loss", input, target);
  const Tensor diff = add_k(p.input, p.target, -1.0);
  const Tensor out = reduce_loss(ops::run_binary_same(mul_kernel, diff, diff), reduction);
  if (Recorder rec{"MseLossBackward0", {&input, &target}}) {
    rec.save(p.input).save(p.target);
    rec.finish(
        out,
        [reduction, shape = p.shape, sx = input.shape(),
         st = target.shape()](BackwardContext& ctx) -> Grads {
          // (x - t)^2's gradient as mul's two contributions, (g d) + (g d).
          const Tensor half =
              elementwise_grad(ctx.grad(), reduction, shape) * (ctx.saved(0) - ctx.saved(1));
          const Tensor gd = half + half;
          return {ctx.needs(0) ? sum_to(gd, sx) : Tensor(),
                  ctx.needs(1) ? sum_to(-gd, st) : Tensor()};
        },
        same_operands(p, input, target));
  }
  return out;
}

Tensor l1_loss_body(const Tensor& input, const Tensor& target, Reduction reduction) {
  const Pair p = prepare_pair("l1_loss", input, target);
  const Tensor out =
      reduce_loss(ops::run_unary(abs_kernel, add_k(p.input, p.target, -1.0)), reduction);
  if (Recorder rec{"L1LossBackward0", {&input, &target}}) {
    rec.save(p.input).save(p.target);
    rec.finish(
        out,
        [reduction, shape = p.shape, sx = input.shape(),
         st = target.shape()](BackwardContext& ctx) -> Grads {
          const Tensor gd =
              elementwise_grad(ctx.grad(), reduction, shape) * sign(ctx.saved(0) - ctx.saved(1));
          return {ctx.needs(0) ? sum_to(gd, sx) : Tensor(),
                  ctx.needs(1) ? sum_to(-gd, st) : Tensor()};
        },
        same_operands(p, input, target));
  }
  return out;
}

Tensor binary_cross_entropy_with_logits_body(const Tensor& input, const Tensor& target,
                                             Reduction reduction, const Tensor& pos_weight) {
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
  Tensor x, t, pw;
  {
    autograd::NoGradGuard no_grad;
    x = input.to(dtype);
    t = target.to(dtype);
    if (pos_weight.defined()) pw = pos_weight.to(dtype);
  }
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
  const Tensor out = reduce_loss(loss, reduction);
  if (Recorder rec{"BinaryCrossEntropyWithLogitsBackward0", {&input, &target, &pos_weight}}) {
    rec.save(x).save(t).save(pw);
    rec.finish(
        out,
        [reduction, shape, sx = input.shape(),
         sw = pos_weight.defined() ? pos_weight.shape() : Shape{}](BackwardContext& ctx) -> Grads {
          const Tensor x = ctx.saved(0), t = ctx.saved(1), pw = ctx.saved(2);
          const Tensor g = elementwise_grad(ctx.grad(), reduction, shape);
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

// ---- class losses -------------------------------------------------------------------------------
Tensor nll_loss_body(const Tensor& logp, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  MT_CHECK(logp.dim() >= 1, "nll_loss: input must have at least 1 dimension");
  check_floating("nll_loss", logp);
  // Unbatched [C] input with a 0-d target, or class dim 1 of [N, C, d1, ...].
  const auto [lp, tg, unbatched] = batched("nll_loss", logp, target, logp.shape());
  const Picked p = pick(lp, tg, ignore_index);
  const Tensor loss = unbatched ? p.loss.reshape(Shape{}) : p.loss;
  // Mean divides by the weights' sum: the targets that count.
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

Tensor cross_entropy_body(const Tensor& x, const Tensor& target, Reduction reduction,
                          double label_smoothing, int64_t ignore_index) {
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
    const Tensor loss = ops::run_unary(
        neg_kernel, reduce_k(sum_kernel, ops::run_binary_same(mul_kernel, logp, t), class_dim));
    const Tensor out = reduce_loss(loss, reduction);
    if (Recorder rec{"CrossEntropyLossBackward0", {&x, &target}}) {
      rec.save(logp).save(t);
      rec.finish(
          out, [reduction, ls, class_dim, shape = loss.shape()](BackwardContext& ctx) -> Grads {
            const Tensor logp = ctx.saved(0), t = ctx.saved(1);
            // -sum(logp * t) over the class dim, t = target (1 - ls) + ls / classes.
            const Tensor g = (-elementwise_grad(ctx.grad(), reduction, shape)).unsqueeze(class_dim);
            Grads grads(2);
            if (ctx.needs(0)) {
              const Tensor g_logp = g * t;
              grads[0] = ops::empty_as(logp.shape(), logp);
              log_softmax_backward_kernel(logp.device())(grads[0], g_logp, logp, class_dim);
            }
            if (ctx.needs(1)) grads[1] = ls > 0.0 ? g * logp * (1.0 - ls) : g * logp;
            return grads;
          });
    }
    return out;
  }

  const auto [lp, tg, unbatched] = batched("cross_entropy", logp, target, input.shape());
  const Picked p = pick(lp, tg, ignore_index);
  Tensor loss = p.loss;
  Tensor valid;  // the targets that count, in logp's dtype
  if (ls > 0.0 || reduction == Reduction::Mean) {
    autograd::NoGradGuard no_grad;
    valid = (tg != ignore_index).to(lp.dtype());
  }
  if (ls > 0.0) {
    // The uniform part: -sum(logp) / classes for each target that counts.
    const Tensor smooth = ops::run_binary_same(
        mul_kernel,
        ops::run_binary_same(div_kernel, ops::run_unary(neg_kernel, reduce_k(sum_kernel, lp, 1)),
                             scalar_like(static_cast<double>(classes), lp)),
        valid);
    loss = add_k(ops::run_binary_same(mul_kernel, loss, scalar_like(1.0 - ls, lp)),
                 ops::run_binary_same(mul_kernel, smooth, scalar_like(ls, lp)));
  }
  const Tensor valid_sum = reduction == Reduction::Mean ? reduce_k(sum_kernel, valid) : Tensor();
  const Tensor out = reduction == Reduction::Mean
                         ? ops::run_binary_same(div_kernel, reduce_k(sum_kernel, loss), valid_sum)
                         : reduce_loss(unbatched ? loss.reshape(Shape{}) : loss, reduction);
  if (Recorder rec{"CrossEntropyLossBackward0", {&x}}) {
    rec.save(logp).save(p.hit).save(p.weight).save(valid).save(valid_sum);
    rec.finish(out, [reduction, ls, classes, class_dim](BackwardContext& ctx) -> Grads {
      const Tensor logp = ctx.saved(0), hit = ctx.saved(1), weight = ctx.saved(2);
      const Tensor g = reduction == Reduction::Mean
                           ? (ctx.grad() / ctx.saved(4)).expand(weight.shape())
                           : elementwise_grad(ctx.grad(), reduction, weight.shape());
      Tensor g_lp = pick_backward(ls > 0.0 ? g * (1.0 - ls) : g, hit, weight);
      if (ls > 0.0) {
        const Tensor g_uniform = -(g * ls * ctx.saved(3) / static_cast<double>(classes));
        g_lp = g_lp + g_uniform.unsqueeze(1).expand(hit.shape());
      }
      Tensor grad = ops::empty_as(logp.shape(), logp);
      log_softmax_backward_kernel(logp.device())(grad, g_lp.reshape(logp.shape()), logp, class_dim);
      return {grad};
    });
  }
  return out;
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return autograd::with_autocast<OpId::mse_loss>(mse_loss_body, input, target, reduction);
}
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return autograd::with_autocast<OpId::l1_loss>(l1_loss_body, input, target, reduction);
}
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction, const Tensor& pos_weight) {
  return autograd::with_autocast<OpId::binary_cross_entropy_with_logits>(
      binary_cross_entropy_with_logits_body, input, target, reduction, pos_weight);
}
Tensor nll_loss(const Tensor& input, const Tensor& target, Reduction reduction,
                int64_t ignore_index) {
  return autograd::with_autocast<OpId::nll_loss>(nll_loss_body, input, target, reduction,
                                                 ignore_index);
}
Tensor cross_entropy(const Tensor& input, const Tensor& target, Reduction reduction,
                     double label_smoothing, int64_t ignore_index) {
  return autograd::with_autocast<OpId::cross_entropy>(cross_entropy_body, input, target, reduction,
                                                      label_smoothing, ignore_index);
}

}  // namespace mantissa
