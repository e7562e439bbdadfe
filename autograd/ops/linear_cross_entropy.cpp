// linear_cross_entropy: cross_entropy(linear(x, W, b), target) over rows of x taken a chunk at a
// time, so that only one chunk's logits [rows, V] ever exist (the whole [N, V] logits and their
// gradient are the largest tensors of a language model's step). As in Liger's and llm.c's fused
// heads, with Mean or Sum the forward also computes the gradients while it holds each chunk's
// logits: cross_entropy_rows overwrites them with d loss / d logits, and two opmath GEMMs
// (gemm_opmath) turn that into the input's rows and add into the weight's gradient. Backward then
// only scales them by the incoming gradient (and 1 / counted targets for Mean): three GEMMs in
// all, as the unfused linear + cross_entropy. Reduction None needs the gradient of each row
// before its products, so its backward runs the chunks again (four GEMMs).
//
// Numerics: the logits are the products in the inputs' dtype (under autocast, float16/bfloat16)
// rounded once, as linear's; the loss math is opmath; the gradient of each logit is rounded once
// to the inputs' dtype, as the unfused autocast path rounds it entering linear's backward; the
// input and weight gradients accumulate in opmath over the chunks and round once, after scaling.
// Without the chunk scale folded into the logits' gradient (backward applies it), a float16
// gradient keeps the range it has at scale 1, whatever the loss scale.
#include <algorithm>

#include "autograd/ops/loss_common.h"

namespace mantissa {
namespace {

using namespace loss_detail;

constexpr int64_t kChunkLogits = int64_t(1) << 24;

// The operands, checked and folded to rows.
struct Problem {
  Tensor x;       // [N, C], contiguous
  Tensor w;       // [V, C]
  Tensor b;       // [V] or undefined
  Tensor target;  // int64 [N], contiguous
  int64_t rows = 0, classes = 0, chunk = 0;
  DType opmath = kFloat32;
};

Problem check(const Tensor& input, const Tensor& weight, const Tensor& target, const Tensor& bias,
              double label_smoothing, int64_t chunk_rows) {
  const char* op = "linear_cross_entropy";
  MT_CHECK(input.defined() && weight.defined() && target.defined(), op,
           ": expected defined input, weight and target");
  check_floating(op, input);
  ops::check_same_device(op, input, weight);
  ops::check_same_device(op, input, target);
  MT_CHECK(input.dim() >= 1, op, ": expected input with at least 1 dim, got ", input.shape());
  MT_CHECK(weight.dim() == 2 && weight.size(1) == input.size(-1), op,
           ": expected weight [classes, ", input.size(-1), "] for input of shape ", input.shape(),
           ", got ", weight.shape());
  MT_CHECK(weight.size(0) > 0, op, ": expected at least one class, got weight of shape ",
           weight.shape());
  MT_CHECK(weight.dtype() == input.dtype(), op,
           ": expected input and weight to have the same dtype, but got: ", input.dtype(),
           " != ", weight.dtype());
  if (bias.defined()) {
    ops::check_same_device(op, input, bias);
    MT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && bias.dtype() == input.dtype(), op,
             ": expected bias [", weight.size(0), "] of dtype ", input.dtype(), ", got ",
             bias.shape(), " ", bias.dtype());
  }
  MT_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32, op,
           ": expected class index target of dtype int64, got ", target.dtype());
  Shape leading = input.shape();
  leading.erase(input.dim() - 1);
  MT_CHECK(target.shape() == leading, op, ": expected target of shape ", leading,
           " for input of shape ", input.shape(), ", got ", target.shape());
  MT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0, op,
           ": label_smoothing must be between 0.0 and 1.0, got ", label_smoothing);
  MT_CHECK(chunk_rows >= 0, op, ": chunk_rows must be >= 0 (0: automatic), got ", chunk_rows);

  Problem p;
  p.classes = weight.size(0);
  p.rows = leading.numel();
  p.opmath = input.dtype() == kFloat64 ? kFloat64 : kFloat32;
  p.chunk = chunk_rows > 0 ? chunk_rows : std::max<int64_t>(1, kChunkLogits / p.classes);
  p.chunk = std::max<int64_t>(1, std::min(p.chunk, p.rows));
  autograd::NoGradGuard no_grad;
  p.x = input.reshape(Shape{p.rows, input.size(-1)}).contiguous();
  p.w = weight;
  p.b = bias;
  p.target = target.reshape(Shape{p.rows}).to(kInt64).contiguous();
  return p;
}

// The opmath accumulators of the gradients, each undefined when not wanted.
struct Accumulators {
  Tensor dx;  // [N, C]
  Tensor dw;  // [V, C]
  Tensor db;  // [V] (as [1, V] for the GEMM with a row of ones)
};

Accumulators accumulators(const Problem& p, bool dx, bool dw, bool db) {
  const TensorOptions o = TensorOptions(p.x.device()).dtype(p.opmath);
  Accumulators a;
  if (dx) a.dx = empty(p.x.shape(), o);
  if (dw) a.dw = empty(p.w.shape(), o);
  if (db) a.db = empty(Shape{1, p.classes}, o);
  return a;
}

// Runs every chunk: its logits, their loss rows into `loss` (when defined), and with `grads`
// their gradient scaled by `scale` (opmath [N], or undefined for 1) into the accumulators.
void run_chunks(const Problem& p, const CrossEntropyRowsParams& params, const Tensor& loss,
                const Tensor& scale, Accumulators* grads) {
  autograd::NoGradGuard no_grad;  // views and buffers of the op's own
  if (p.rows == 0) {
    // No rows: the weight and bias gradients are empty sums (the input's has no elements).
    if (grads && grads->dw.defined()) grads->dw.zero_();
    if (grads && grads->db.defined()) grads->db.zero_();
    return;
  }
  const Device device = p.x.device();
  const TensorOptions logit_options = TensorOptions(device).dtype(p.x.dtype());
  const Tensor ones =
      grads && grads->db.defined() ? full(Shape{1, p.chunk}, 1.0, logit_options) : Tensor();
  Tensor scratch_loss;
  for (int64_t r0 = 0; r0 < p.rows; r0 += p.chunk) {
    const int64_t n = std::min(p.chunk, p.rows - r0);
    const Tensor xc = p.x.narrow(0, r0, n);
    const Tensor logits = empty(Shape{n, p.classes}, logit_options);
    linear_forward_kernel(device)(logits, xc, p.w, p.b, LinearActivation::None, false);
    Tensor loss_c;
    if (loss.defined()) {
      loss_c = loss.narrow(0, r0, n);
    } else {
      if (!scratch_loss.defined())
        scratch_loss = empty(Shape{p.chunk}, TensorOptions(device).dtype(p.opmath));
      loss_c = scratch_loss.narrow(0, 0, n);
    }
    cross_entropy_rows_kernel(device)(logits, loss_c, p.target.narrow(0, r0, n),
                                      scale.defined() ? scale.narrow(0, r0, n) : Tensor(), params);
    if (!grads) continue;
    const bool first = r0 == 0;
    if (grads->dx.defined())
      gemm_opmath_kernel(device)(grads->dx.narrow(0, r0, n), logits, p.w, false);
    if (grads->dw.defined()) gemm_opmath_kernel(device)(grads->dw, logits.t(), xc, !first);
    if (grads->db.defined())
      gemm_opmath_kernel(device)(grads->db, ones.narrow(1, 0, n), logits, !first);
  }
}

// An accumulator times `factor` (opmath, broadcasting), rounded once to `dtype`, shaped `shape`.
Tensor finish(const Tensor& acc, const Tensor& factor, DType dtype, const Shape& shape) {
  if (!acc.defined()) return acc;
  Tensor g = factor.defined() ? acc * factor : acc;
  if (g.dtype() != dtype) g = g.to(dtype);
  return g.shape() == shape ? g : g.reshape(shape);
}

}  // namespace

Tensor linear_cross_entropy_op(const Tensor& input, const Tensor& weight, const Tensor& target,
                               const Tensor& bias, Reduction reduction, double label_smoothing,
                               int64_t ignore_index, int64_t chunk_rows) {
  const Problem p = check(input, weight, target, bias, label_smoothing, chunk_rows);
  // As cross_entropy: a device target out of range gives NaN there (cross_entropy_rows).
  check_class_targets("linear_cross_entropy", p.target, p.classes, ignore_index);
  const TensorOptions opmath = TensorOptions(p.x.device()).dtype(p.opmath);
  const bool record = autograd::needs_grad({&input, &weight, &bias});
  const bool grads_now = record && reduction != Reduction::None;
  CrossEntropyRowsParams params{label_smoothing, ignore_index, grads_now};

  const Tensor loss_rows = empty(Shape{p.rows}, opmath);
  Accumulators acc;
  if (grads_now) {
    acc = accumulators(p, input.requires_grad(), weight.requires_grad(),
                       bias.defined() && bias.requires_grad());
  }
  run_chunks(p, params, loss_rows, Tensor(), grads_now ? &acc : nullptr);

  Tensor out, counted;
  {
    autograd::NoGradGuard no_grad;
    switch (reduction) {
      case Reduction::None:
        out = loss_rows.reshape(target.shape());
        break;
      case Reduction::Sum:
        out = loss_rows.sum();
        break;
      case Reduction::Mean:
        // PyTorch's mean over the targets that count (NaN when none does).
        counted = (p.target != ignore_index).to(p.opmath).sum();
        out = loss_rows.sum() / counted;
        break;
    }
  }
  if (!record) return out;

  const DType dtype = input.dtype();
  Recorder rec{"LinearCrossEntropyBackward0", {&input, &weight, &bias}};
  if (grads_now) {
    // With no target counted the gradients are zero sums, as PyTorch's (the loss is NaN).
    Tensor divisor;
    if (counted.defined()) {
      autograd::NoGradGuard no_grad;
      divisor = counted.clamp(1.0, std::nullopt);
    }
    rec.save(acc.dx).save(acc.dw).save(acc.db).save(divisor);
    rec.finish(out, [dtype, mean = reduction == Reduction::Mean, x_shape = input.shape(),
                     w_shape = weight.shape(),
                     b_shape = bias.defined() ? bias.shape() : Shape{}](BackwardContext& ctx) {
      const Tensor g = ctx.grad();  // opmath, as the loss
      const Tensor factor = mean ? g / ctx.saved(3) : g;
      Grads grads(3);
      if (ctx.needs(0)) grads[0] = finish(ctx.saved(0), factor, dtype, x_shape);
      if (ctx.needs(1)) grads[1] = finish(ctx.saved(1), factor, dtype, w_shape);
      if (ctx.needs(2)) grads[2] = finish(ctx.saved(2), factor, dtype, b_shape);
      return grads;
    });
    return out;
  }
  // Reduction None: the rows' gradients are known only in backward; the chunks run again there,
  // on the problem as the forward had it (its tensors saved, its sizes captured).
  rec.save(p.x).save(p.w).save(p.b).save(p.target);
  Problem sizes = p;
  sizes.x = sizes.w = sizes.b = sizes.target = Tensor();
  rec.finish(out, [params, sizes, dtype, x_shape = input.shape(), w_shape = weight.shape(),
                   b_shape = bias.defined() ? bias.shape() : Shape{}](BackwardContext& ctx) {
    Problem q = sizes;
    q.x = ctx.saved(0);
    q.w = ctx.saved(1);
    q.b = ctx.saved(2);
    q.target = ctx.saved(3);
    CrossEntropyRowsParams with_grad = params;
    with_grad.grad = true;
    Accumulators a = accumulators(q, ctx.needs(0), ctx.needs(1), ctx.needs(2));
    const Tensor scale = ctx.grad().reshape(Shape{q.rows}).to(q.opmath).contiguous();
    run_chunks(q, with_grad, Tensor(), scale, &a);
    Grads grads(3);
    grads[0] = finish(a.dx, Tensor(), dtype, x_shape);
    grads[1] = finish(a.dw, Tensor(), dtype, w_shape);
    grads[2] = finish(a.db, Tensor(), dtype, b_shape);
    return grads;
  });
  return out;
}

}  // namespace mantissa
