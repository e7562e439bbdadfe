// The regression losses, one node each: mse_loss, l1_loss, smooth_l1_loss and huber_loss. All
// broadcast input against target (warning when their shapes differ, as PyTorch) and take
// autocast's float32 policy.
#include "autograd/ops/loss_common.h"

namespace mantissa {
namespace {

using namespace loss_detail;

// The gradient for input and target of a loss of d = input - target, from its gradient gd
// w.r.t. d.
Grads input_target_grads(BackwardContext& ctx, const Tensor& gd, const Shape& sx, const Shape& st) {
  return {ctx.needs(0) ? sum_to(gd, sx) : Tensor(), ctx.needs(1) ? sum_to(-gd, st) : Tensor()};
}

// smooth_l1 and huber are one piecewise loss of z = |input - target| with knee k: quadratic
// below it, linear above. smooth_l1 (knee beta) is 0.5 z^2 / beta | z - 0.5 beta; huber (knee
// delta) is beta times that, 0.5 z^2 | delta (z - 0.5 delta), as PyTorch computes them.
Tensor piecewise_loss(const Tensor& z, double knee, bool huber) {
  autograd::NoGradGuard no_grad;
  if (knee == 0.0) return z;  // smooth_l1 with beta 0 is l1
  const Tensor quadratic = huber ? z * 0.5 * z : z * 0.5 * z / knee;
  const Tensor linear = huber ? (z - 0.5 * knee) * knee : z - 0.5 * knee;
  return where(z < knee, quadratic, linear);
}

// The derivative w.r.t. d = input - target: PyTorch's backward kernels take the linear branch's
// slope from |d| >= knee on, so at d = 0 with beta 0 smooth_l1's slope is -1.
Tensor piecewise_slope(const Tensor& d, double knee, bool huber) {
  if (knee == 0.0) return (d > 0.0).to(d.dtype()) * 2.0 - 1.0;
  return huber ? clamp(d, -knee, knee) : clamp(d / knee, -1.0, 1.0);
}

Tensor piecewise_body(const char* op, const char* node, const Tensor& input, const Tensor& target,
                      Reduction reduction, double knee, bool huber) {
  const Pair p = prepare_pair(op, input, target);
  const Tensor z = ops::run_unary(abs_kernel, add_k(p.input, p.target, -1.0));
  const Tensor out = reduce_loss(piecewise_loss(z, knee, huber), reduction);
  if (Recorder rec{node, {&input, &target}}) {
    rec.save(p.input).save(p.target);
    rec.finish(out,
               [reduction, knee, huber, shape = p.shape, sx = input.shape(),
                st = target.shape()](BackwardContext& ctx) -> Grads {
                 const Tensor gd = elementwise_grad(ctx.grad(), reduction, shape) *
                                   piecewise_slope(ctx.saved(0) - ctx.saved(1), knee, huber);
                 return input_target_grads(ctx, gd, sx, st);
               });
  }
  return out;
}

}  // namespace

Tensor mse_loss_op(const Tensor& input, const Tensor& target, Reduction reduction) {
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
          return input_target_grads(ctx, half + half, sx, st);
        },
        same_operands(p, input, target));
  }
  return out;
}

Tensor l1_loss_op(const Tensor& input, const Tensor& target, Reduction reduction) {
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
          return input_target_grads(ctx, gd, sx, st);
        },
        same_operands(p, input, target));
  }
  return out;
}

Tensor smooth_l1_loss_op(const Tensor& input, const Tensor& target, Reduction reduction,
                         double beta) {
  MT_CHECK(beta >= 0.0, "smooth_l1_loss: beta must be non-negative, got ", beta);
  return piecewise_body("smooth_l1_loss", "SmoothL1LossBackward0", input, target, reduction, beta,
                        false);
}

Tensor huber_loss_op(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  MT_CHECK(delta > 0.0, "huber_loss: delta must be positive, got ", delta);
  return piecewise_body("huber_loss", "HuberLossBackward0", input, target, reduction, delta, true);
}

}  // namespace mantissa
