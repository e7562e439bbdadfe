// The float8 ops of FP8 training: scales, scaled casts, the scaled matrix product
// (torch._scaled_mm's contract) and the float8 linear layer (torchao's Float8Linear, its
// matmul_with_hp_or_float8_args: each operand of each of the three products cast as the config
// says, with scales computed from the operand at each call).
#include <cmath>
#include <limits>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

void check_float8_dtype(const char* op, DType dtype) {
  MT_CHECK(is_float8(dtype), op, ": expected a float8 dtype (float8_e4m3fn, float8_e5m2), got ",
           dtype);
}

void check_high_precision(const char* op, const char* what, const Tensor& t) {
  MT_CHECK(t.defined(), op, ": expected a defined ", what);
  MT_CHECK(is_floating(t.dtype()) && !is_float8(t.dtype()), op, ": expected a floating ", what,
           " (float32, float64, float16, bfloat16), got ", t.dtype());
}

// The float8 ops have no derivative of their own (float8_linear's backward is written out): a
// gradient asked through one would be lost without a word, so it is refused.
void refuse_grad(const char* op, std::initializer_list<const Tensor*> inputs) {
  MT_CHECK(!autograd::needs_grad(inputs), op,
           " is not differentiable: call it on tensors that do not require grad (detach them, or "
           "use NoGradGuard); float8_linear differentiates through its float8 products");
}

// max |x| in one read of x: the infinity norm, a 0-d tensor of x's dtype (NaN propagates, as
// through amax). An empty tensor has none, as amax refuses one.
Tensor abs_max(const Tensor& x) {
  MT_CHECK(x.numel() > 0, "float8: an empty tensor (shape ", x.shape(),
           ") has no absolute maximum to scale by");
  return norm(x, std::numeric_limits<double>::infinity());
}

// A scale's shape against the product's [M,N]: one value, or a row (column) of them.
bool is_single(const Tensor& s) { return s.numel() == 1 && s.dim() <= 2; }
bool is_rows(const Tensor& s, int64_t m) {
  return s.dim() == 2 && s.size(0) == m && s.size(1) == 1;
}
bool is_cols(const Tensor& s, int64_t n) {
  return s.dim() == 2 && s.size(0) == 1 && s.size(1) == n;
}

// A float8 matrix as bfloat16 (exact), in one dense pass: a transposed matrix is widened as its
// dense transpose and handed back transposed (the GEMM reads either layout).
Tensor widened(const Tensor& m) {
  if (!m.is_contiguous() && m.t().is_contiguous()) return m.t().to(kBFloat16).t();
  return m.contiguous().to(kBFloat16);
}

}  // namespace

Tensor float8_scale_op(const Tensor& x, DType dtype, Float8Scaling scaling, int64_t dim,
                       bool power_of_2) {
  const char* op = "float8_scale";
  check_float8_dtype(op, dtype);
  check_high_precision(op, "input", x);
  MT_CHECK(scaling != Float8Scaling::Disabled, op, ": scaling 'disabled' has no scale");
  MT_CHECK(scaling != Float8Scaling::Delayed, op,
           ": a delayed scale comes from the layer's amax history (float8_linear's state), not "
           "from x");
  autograd::NoGradGuard no_grad;
  Tensor amax_of_x;
  if (scaling == Float8Scaling::Tensorwise) {
    amax_of_x = abs_max(x);
  } else {
    MT_CHECK(x.dim() >= 1, op, ": rowwise scaling needs at least one dim, got shape ", x.shape());
    const int64_t d = dim < 0 ? dim + x.dim() : dim;
    MT_CHECK(d >= 0 && d < x.dim(), op, ": dim ", dim, " out of range for shape ", x.shape());
    // max |x| along d in one read (the infinity norm), as abs_max does for the whole tensor.
    amax_of_x = norm(x, std::numeric_limits<double>::infinity(), Shape{d}, /*keepdim=*/true);
  }
  amax_of_x = amax_of_x.contiguous();
  Tensor scale = ops::empty_on(amax_of_x.shape(), kFloat32, x.device());
  amax_to_scale_kernel(x.device())(scale, amax_of_x, float8_max(dtype), power_of_2);
  return scale;
}

Tensor float8_cast_op(const Tensor& x, const Tensor& scale, DType dtype) {
  const char* op = "float8_cast";
  check_float8_dtype(op, dtype);
  check_high_precision(op, "input", x);
  MT_CHECK(scale.defined(), op, ": expected a defined scale");
  MT_CHECK(scale.dtype() == kFloat32, op, ": expected a float32 scale, got ", scale.dtype());
  ops::check_same_device(op, x, scale);
  MT_CHECK(broadcast_shapes(x.shape(), scale.shape(), op) == x.shape(), op, ": scale of shape ",
           scale.shape(), " does not broadcast to the input's shape ", x.shape());
  refuse_grad(op, {&x, &scale});
  // A transposed matrix (a weight, cast as weight.t()) is cast as its dense transpose and handed
  // back transposed, keeping x's layout as PyTorch's .to() does, so the cast runs its dense loop.
  if (x.dim() == 2 && !x.is_contiguous() && x.t().is_contiguous() &&
      (scale.numel() == 1 || scale.dim() == 2))
    return float8_cast_op(x.t(), scale.dim() == 2 ? scale.t() : scale, dtype).t();
  Tensor out = ops::empty_on(x.shape(), dtype, x.device());
  float8_cast_kernel(x.device())(out, x, scale.expand(x.shape()));
  return out;
}

Tensor scaled_mm_op(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                    const Tensor& bias, std::optional<DType> out_dtype, bool /*use_fast_accum*/) {
  const char* op = "scaled_mm";
  MT_CHECK(a.defined() && b.defined() && scale_a.defined() && scale_b.defined(), op,
           ": expected defined matrices and scales");
  for (const Tensor* t : {&b, &scale_a, &scale_b}) ops::check_same_device(op, a, *t);
  MT_CHECK(a.dim() == 2 && b.dim() == 2, op, ": expected matrices, got shapes ", a.shape(), " and ",
           b.shape());
  MT_CHECK(a.size(1) == b.size(0), op, ": shapes cannot be multiplied (", a.shape(), " and ",
           b.shape(), ")");
  MT_CHECK(is_float8(a.dtype()) && is_float8(b.dtype()), op,
           ": expected float8 matrices (float8_e4m3fn, float8_e5m2), got ", a.dtype(), " and ",
           b.dtype());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  MT_CHECK(scale_a.dtype() == kFloat32 && scale_b.dtype() == kFloat32, op,
           ": expected float32 scales, got ", scale_a.dtype(), " and ", scale_b.dtype());
  MT_CHECK(
      (is_single(scale_a) || is_rows(scale_a, M)) && (is_single(scale_b) || is_cols(scale_b, N)),
      op, ": expected scale_a of one element or shape [", M, ", 1] and scale_b of one element ",
      "or shape [1, ", N, "], got ", scale_a.shape(), " and ", scale_b.shape());
  refuse_grad(op, {&a, &b, &scale_a, &scale_b, &bias});
  const DType out_type = out_dtype.value_or(a.dtype());
  MT_CHECK((kScaledMmOutTypes & dtype_bit(out_type)) != 0, op,
           ": out_dtype must be floating or float8, got ", out_type);
  Tensor bias32;
  if (bias.defined()) {
    ops::check_same_device(op, a, bias);
    MT_CHECK(bias.dim() == 1 && bias.size(0) == N, op, ": expected a bias of shape [", N, "], got ",
             bias.shape());
    check_high_precision(op, "bias", bias);
    bias32 = bias.to(kFloat32).contiguous();
  }
  autograd::NoGradGuard no_grad;
  Tensor acc = ops::empty_on(Shape{M, N}, kFloat32, a.device());
  if (K == 0) {
    fill_kernel(a.device())(acc, Scalar(0.0));
  } else if (acc.numel() > 0) {
    // Exact widening: the products of bfloat16 values are exact in the float32 accumulator.
    gemm_opmath_kernel(a.device())(acc, widened(a), widened(b), false);
  }
  Tensor out = ops::empty_on(Shape{M, N}, out_type, a.device());
  scaled_mm_epilogue_kernel(a.device())(out, acc, scale_a.contiguous(), scale_b.contiguous(),
                                        bias32);
  return out;
}

namespace {

// One GEMM operand: float8 data with its scale (the factor that made it), or the high-precision
// tensor itself (no scale) when its cast is disabled.
struct Operand {
  Tensor data;
  Tensor scale;
  Operand t() const { return {data.t(), scale.defined() && scale.dim() == 2 ? scale.t() : scale}; }
};

// torchao's hp_tensor_to_float8_dynamic: `dim` is the dim a rowwise scale reduces.
Operand cast_operand(const Tensor& hp, const Float8Cast& c, int64_t dim, bool power_of_2) {
  if (c.scaling == Float8Scaling::Disabled) return {hp, Tensor()};
  const Tensor s = float8_scale(hp, c.dtype, c.scaling, dim, power_of_2);
  return {float8_cast(hp, s, c.dtype), s};
}

// Delayed scaling's state (float8_linear's amax_history and scale): the column of each tensor.
enum DelayedRole : int64_t { kInputRole = 0, kWeightRole = 1, kGradOutputRole = 2 };

// TE's delayed cast: hp in float8 by the layer's current scale for `role` (a copy, so the
// backward reads the scale the forward used), its absolute maximum folded into row 0 of the
// history. A NaN maximum is not recorded (TE's skips the NaN elements instead; the tensor's
// other values are lost for the step here).
Operand cast_delayed(const Tensor& hp, const Float8Cast& c, const Tensor& history,
                     const Tensor& scale, int64_t role) {
  Tensor a = abs_max(hp).to(kFloat32);
  a.masked_fill_(isnan(a), 0.0);
  Tensor slot = history.narrow(0, 0, 1).narrow(1, role, 1);
  slot.copy_(maximum(slot, a.reshape(Shape{1, 1})));
  const Tensor s = scale.narrow(0, role, 1).reshape(Shape{}).clone();
  return {float8_cast(hp, s, c.dtype), s};
}

// torchao's mm of two operands (preprocess_addmm, addmm_float8_unwrapped): the scaled product
// with the inverted scales, in out_dtype. Row scales without fast accumulation are applied after a
// product in bfloat16 (a float32 or float16 result of row scales is produced in bfloat16 and
// converted), as torchao does, so the values are torchao's.
Tensor product(const Operand& a, const Operand& b, DType out_dtype, bool fast_accum) {
  if (!a.scale.defined()) {
    const Tensor bb = b.data.dtype() == a.data.dtype() ? b.data : b.data.to(a.data.dtype());
    const Tensor r = mm(a.data, bb);
    return r.dtype() == out_dtype ? r : r.to(out_dtype);
  }
  const int64_t M = a.data.size(0), N = b.data.size(1);
  // One row-scaled operand and one tensorwise: the single scale is repeated along the other's
  // axis, and the product is a row-scaled one (torchao's preprocess_addmm).
  Tensor sa = a.scale, sb = b.scale;
  if (is_single(sa) && is_cols(sb, N)) sa = sa.reshape(Shape{1, 1}).expand(Shape{M, 1});
  if (is_rows(sa, M) && is_single(sb)) sb = sb.reshape(Shape{1, 1}).expand(Shape{1, N});
  Tensor inv_a = reciprocal(sa), inv_b = reciprocal(sb);
  const bool rowwise = is_rows(sa, M) && is_cols(sb, N);
  Tensor post;
  if (rowwise && !fast_accum) {
    post = mul(inv_a, inv_b);
    inv_a = inv_b = ones(Shape{}, TensorOptions(a.data.device()).dtype(kFloat32));
  }
  const DType mm_dtype =
      rowwise && (out_dtype == kFloat32 || out_dtype == kFloat16) ? kBFloat16 : out_dtype;
  Tensor out = scaled_mm(a.data, b.data, inv_a, inv_b, Tensor(), mm_dtype, fast_accum);
  if (post.defined()) out = mul(out, post).to(mm_dtype);  // torchao's in-place `*=`
  return out.dtype() == out_dtype ? out : out.to(out_dtype);
}

// The fast-accumulation switch of each product, torchao's defaults (Float8GemmConfig).
constexpr bool kFastAccumOutput = true, kFastAccumGradInput = false, kFastAccumGradWeight = false;

// A cast of one scale for the whole tensor, made again in the backward, gives the same bits.
bool reuses_tensorwise(const Float8Cast& forward, const Float8Cast& backward) {
  return forward == backward && (forward.scaling == Float8Scaling::Tensorwise ||
                                 forward.scaling == Float8Scaling::Delayed);
}

// float8_linear's stats (on request): into row `role`, the largest |hp| (a max), and the values
// the cast saturated (|hp| * scale would round past fp8_max) and flushed (nonzero, |hp| * scale at
// most half the smallest subnormal, which rounds to zero) (counts). A NaN is neither.
void record_stats(const Tensor& stats, int64_t role, const Tensor& hp, const Operand& o,
                  DType dtype) {
  const auto add = [&](int64_t col, const Tensor& v, bool max) {
    Tensor cell = stats.narrow(0, role, 1).narrow(1, col, 1);
    const Tensor v64 = v.to(kFloat64).reshape(Shape{1, 1});
    cell.copy_(max ? maximum(cell, v64) : cell + v64);
  };
  add(0, abs_max(hp), true);
  if (!o.scale.defined()) return;  // kept in high precision: nothing was cast
  const Tensor y = abs(hp.to(kFloat32)) * o.scale;
  const double half_min_subnormal = std::ldexp(1.0, dtype == kFloat8E4M3FN ? -10 : -17);
  // Past the largest value's rounding range: e4m3fn rounds up to 464 (the tie) to 448, e5m2
  // below 61440 to 57344 (its tie goes up). A scaled maximum a rounding above fp8_max is not a
  // saturation.
  add(1, sum(dtype == kFloat8E4M3FN ? y > Scalar(464.0) : y >= Scalar(61440.0)), false);
  add(2, sum(logical_and(y <= Scalar(half_min_subnormal), hp != Scalar(0.0))), false);
}

// One operand's cast: the scaled cast of hp by `c`, from the delayed state when it is delayed;
// with `count`, its stats are recorded (each tensor's first cast in a step's pass).
struct Caster {
  bool pow2;
  Tensor history, scale;  // delayed scaling only
  Tensor stats;           // on request
  Operand operator()(const Tensor& hp, const Float8Cast& c, int64_t dim, DelayedRole role,
                     bool count = true) const {
    Operand o = c.scaling == Float8Scaling::Delayed ? cast_delayed(hp, c, history, scale, role)
                                                    : cast_operand(hp, c, dim, pow2);
    if (count && stats.defined()) record_stats(stats, role, hp, o, c.dtype);
    return o;
  }
};

void check_stats(const char* op, const Tensor& x, const Tensor& stats) {
  if (!stats.defined()) return;
  ops::check_same_device(op, x, stats);
  MT_CHECK(stats.dtype() == kFloat64 && stats.shape() == Shape({3, 3}) && !stats.requires_grad(),
           op, ": expected stats of shape [3, 3] and dtype float64 (not requiring grad), got ",
           stats.shape(), " ", stats.dtype());
}

void check_delayed_state(const char* op, const Float8LinearConfig& config, const Tensor& x,
                         const Tensor& history, const Tensor& scale) {
  if (!config.is_delayed()) {
    MT_CHECK(!history.defined() && !scale.defined(), op,
             ": amax_history and scale are delayed scaling's state; this config's casts are ",
             float8_scaling_name(config.input.scaling));
    return;
  }
  const int64_t len = config.delayed.amax_history_len;
  MT_CHECK(history.defined() && scale.defined(), op,
           ": delayed scaling needs the layer's amax_history [", len, ", 3] and scale [3]");
  ops::check_same_device(op, x, history);
  ops::check_same_device(op, x, scale);
  MT_CHECK(history.dtype() == kFloat32 && scale.dtype() == kFloat32, op,
           ": expected a float32 amax_history and scale, got ", history.dtype(), " and ",
           scale.dtype());
  MT_CHECK(history.shape() == Shape({len, 3}) && scale.shape() == Shape({3}), op,
           ": expected amax_history of shape [", len, ", 3] and scale of shape [3], got ",
           history.shape(), " and ", scale.shape());
  MT_CHECK(!history.requires_grad() && !scale.requires_grad(), op,
           ": amax_history and scale are state, not inputs to differentiate");
}

}  // namespace

Tensor float8_linear_op(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const Float8LinearConfig& config, const Tensor& amax_history,
                        const Tensor& scale, const Tensor& stats) {
  const char* op = "float8_linear";
  config.validate(op);
  check_high_precision(op, "input", x);
  check_high_precision(op, "weight", weight);
  ops::check_same_device(op, x, weight);
  MT_CHECK(x.dim() >= 1, op, ": expected an input with at least 1 dim, got ", x.shape());
  MT_CHECK(weight.dim() == 2, op, ": expected a 2-D weight [out_features, in_features], got ",
           weight.shape());
  const int64_t in = weight.size(1), out_features = weight.size(0);
  MT_CHECK(x.size(-1) == in, op, ": input and weight shapes cannot be multiplied (", x.shape(),
           " and ", weight.shape(), "): expected input's last dim to be ", in);
  if (bias.defined()) {
    ops::check_same_device(op, x, bias);
    check_high_precision(op, "bias", bias);
    MT_CHECK(bias.dim() == 1 && bias.size(0) == out_features, op, ": expected a bias of shape [",
             out_features, "], got ", bias.shape());
  }
  // An empty operand has no absolute maximum to scale by (torchao fails on it too).
  MT_CHECK(x.numel() > 0 && weight.numel() > 0, op, ": expected a non-empty input and weight, got ",
           x.shape(), " and ", weight.shape());
  Shape out_shape = x.shape();
  out_shape.resize(x.dim() - 1);
  const int64_t rows = out_shape.numel();
  out_shape.push_back(out_features);
  check_delayed_state(op, config, x, amax_history, scale);
  check_stats(op, x, stats);
  const bool record = autograd::needs_grad({&x, &weight});
  const Caster cast{config.round_scales_to_power_of_2, amax_history, scale, stats};

  Tensor x2, out;
  Operand xa, wt;
  {
    autograd::NoGradGuard no_grad;
    x2 = x.reshape(Shape{rows, in});
    xa = cast(x2, config.input, -1, kInputRole);
    // weight^T [in, out] with one scale per output column (torchao's axiswise dim 0).
    wt = cast(weight.t(), config.weight, 0, kWeightRole);
    out = product(xa, wt, x.dtype(), kFastAccumOutput).contiguous();
  }
  // A plain view of the fresh product, not one made under the guard (which in-place ops on the
  // output would refuse as a no-grad view).
  if (x.dim() != 2) out = detail::make_view(out, out_shape, contiguous_strides(out_shape), 0);
  if (record) {
    Recorder rec{"Float8LinearBackward0", {&x, &weight}};
    // A tensorwise cast made again in the backward gives the same bits: keep the float8 ones.
    const bool x_fp8 = reuses_tensorwise(config.input, config.input_for_grad_weight);
    const bool w_fp8 = reuses_tensorwise(config.weight, config.weight_for_grad_input);
    rec.save(weight.requires_grad() ? (x_fp8 ? xa.data : x2) : Tensor())
        .save(weight.requires_grad() && x_fp8 ? xa.scale : Tensor())
        .save(x.requires_grad() ? (w_fp8 ? wt.data : weight) : Tensor())
        .save(x.requires_grad() && w_fp8 ? wt.scale : Tensor());
    rec.finish(out,
               [config, x_fp8, w_fp8, rows, out_features, cast, x_shape = x.shape(),
                w_dtype = weight.dtype()](BackwardContext& ctx) -> Grads {
                 const Tensor g = ctx.grad().reshape(Shape{rows, out_features});
                 // A tensorwise grad_output cast is the same for both products: made once.
                 const bool go_once =
                     reuses_tensorwise(config.grad_output, config.grad_output_for_grad_weight);
                 Operand go_shared;
                 if (go_once) go_shared = cast(g, config.grad_output, -1, kGradOutputRole);
                 Tensor gx, gw;
                 if (ctx.needs(0)) {
                   const Operand go =
                       go_once ? go_shared : cast(g, config.grad_output, -1, kGradOutputRole);
                   // weight^T [in, out] cast along its rows, transposed to [out, in] with column
                   // scales.
                   const Operand w_t = w_fp8 ? Operand{ctx.saved(2), ctx.saved(3)}
                                             : cast(ctx.saved(2).t(), config.weight_for_grad_input,
                                                    -1, kWeightRole, false);
                   gx = product(go, w_t.t(), g.dtype(), kFastAccumGradInput).reshape(x_shape);
                 }
                 if (ctx.needs(1)) {
                   // The gradient's stats come from its first cast (the grad_input product's).
                   const Operand go = go_once ? go_shared
                                              : cast(g, config.grad_output_for_grad_weight, 0,
                                                     kGradOutputRole, !ctx.needs(0));
                   const Operand x_in = x_fp8 ? Operand{ctx.saved(0), ctx.saved(1)}
                                              : cast(ctx.saved(0), config.input_for_grad_weight, 0,
                                                     kInputRole, false);
                   gw = product(go.t(), x_in, g.dtype(), kFastAccumGradWeight);
                   if (gw.dtype() != w_dtype) gw = gw.to(w_dtype);
                 }
                 return {gx, gw};
               });
  }
  if (!bias.defined()) return out;
  return add(out, bias.dtype() == out.dtype() ? bias : bias.to(out.dtype()));
}

}  // namespace mantissa
