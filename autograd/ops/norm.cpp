// The normalisation ops.
//  - layer_norm: one node whose forward and backward are the layer_norm_forward/backward kernels
//    over [M, N] rows (M rows of the N normalised elements). Takes autocast's float32 policy.
//  - batch_norm, group_norm, rms_norm: statistics over sets of whole channels of x seen as
//    [N, C, L] (NormSets, engine/kernel_tables.h) from norm_stats, then one node around
//    norm_apply / norm_backward. group_norm and rms_norm take the float32 policy as layer_norm;
//    batch_norm keeps its input dtype and computes its statistics in float32 (opmath), so a
//    float16/bfloat16 input may come with float32 parameters and running statistics (a module
//    left in float32 under autocast).
#include <limits>
#include <optional>

#include "autograd/functions.h"
#include "autograd/op_bodies.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa {
namespace {

// t's elements as M rows of N (t contiguous), or undefined for an undefined t.
Tensor as_rows(const Tensor& t, int64_t M, int64_t N) {
  return t.defined() ? detail::make_view(t, Shape{M, N}, Shape{N, 1}, t.storage_offset())
                     : Tensor();
}

Tensor as_vec(const Tensor& t, int64_t N) {
  return t.defined() ? detail::make_view(t, Shape{N}, Shape{1}, t.storage_offset()) : Tensor();
}

void check_layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                      const Tensor& bias) {
  const int64_t k = normalized_shape.size();
  MT_CHECK(k >= 1 && k <= x.dim(), "layer_norm: normalized_shape ", normalized_shape,
           " does not fit an input of shape ", x.shape());
  for (int64_t i = 0; i < k; ++i) {
    MT_CHECK(x.size(x.dim() - k + i) == normalized_shape[i],
             "layer_norm: given normalized_shape=", normalized_shape,
             ", expected input with shape [*, ...", normalized_shape, "], but got input of size ",
             x.shape());
  }
  if (weight.defined()) {
    MT_CHECK(weight.shape() == normalized_shape, "layer_norm: weight of shape ", weight.shape(),
             " does not match normalized_shape ", normalized_shape);
  }
  if (bias.defined()) {
    MT_CHECK(bias.shape() == normalized_shape, "layer_norm: bias of shape ", bias.shape(),
             " does not match normalized_shape ", normalized_shape);
  }
  MT_CHECK(is_floating(x.dtype()), "layer_norm: expected a floating point input, got ", x.dtype());
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    MT_CHECK(p->device() == x.device(), "layer_norm: expected weight and bias on ", x.device(),
             " like the input, got ", p->device());
    MT_CHECK(p->dtype() == x.dtype(), "layer_norm: expected weight and bias of dtype ", x.dtype(),
             " like the input, got ", p->dtype());
  }
}

// ---- batch_norm, group_norm, rms_norm -----------------------------------------------------------
DType stat_dtype_of(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }

// A per-channel tensor (parameter or running statistic) of `op`: [C], on x's device, in x's dtype
// or, for a float16/bfloat16 x, float32.
void check_channel_tensor(const char* op, const char* what, const Tensor& t, const Tensor& x,
                          int64_t C) {
  if (!t.defined()) return;
  MT_CHECK(t.dim() == 1 && t.size(0) == C, op, ": expected ", what, " of shape [", C,
           "] for an input of shape ", x.shape(), ", got ", t.shape());
  MT_CHECK(t.device() == x.device(), op, ": expected ", what, " on ", x.device(),
           " like the input, got ", t.device());
  MT_CHECK(t.dtype() == x.dtype() || (is_reduced_float(x.dtype()) && t.dtype() == kFloat32), op,
           ": expected ", what, " of dtype ", x.dtype(),
           is_reduced_float(x.dtype()) ? " or float32" : "", " for an input of dtype ", x.dtype(),
           ", got ", t.dtype());
}

Tensor contiguous_or_undefined(const Tensor& t) { return t.defined() ? t.contiguous() : Tensor(); }

// out = norm_apply(x, mean, rstd, weight, bias) with its backward node. x is contiguous;
// stats_from_x says whether mean and rstd were computed from x (their gradient flows to x).
Tensor apply_norm(const char* node, const Tensor& x_in, const Tensor& xc, const Tensor& mean,
                  const Tensor& rstd, const Tensor& weight, const Tensor& bias, const NormSets& ns,
                  bool stats_from_x) {
  Tensor wc, bc;
  {
    autograd::NoGradGuard no_grad;
    wc = contiguous_or_undefined(weight);
    bc = contiguous_or_undefined(bias);
  }
  Tensor y = empty(x_in.shape(), TensorOptions(x_in.device()).dtype(x_in.dtype()));
  norm_apply_kernel(x_in.device())(y, xc, mean, rstd, wc, bc, ns);
  if (autograd::Recorder rec{node, {&x_in, &weight, &bias}}) {
    rec.save(xc).save(wc).save(mean).save(rstd);
    rec.finish(y, [ns, stats_from_x, has_bias = bias.defined(),
                   bias_dtype = bias.defined() ? bias.dtype()
                                               : x_in.dtype()](autograd::BackwardContext& ctx) {
      const Tensor x = ctx.saved(0), w = ctx.saved(1);
      const Tensor g = ctx.grad().contiguous();
      const TensorOptions o = TensorOptions(x.device());
      Tensor gx = ctx.needs(0) ? empty(x.shape(), o.dtype(x.dtype())) : Tensor();
      Tensor gw = ctx.needs(1) ? empty(Shape{ns.C}, o.dtype(w.dtype())) : Tensor();
      Tensor gb = ctx.needs(2) && has_bias ? empty(Shape{ns.C}, o.dtype(bias_dtype)) : Tensor();
      norm_backward_kernel(x.device())(gx, gw, gb, g, x, ctx.saved(2), ctx.saved(3), w, ns,
                                       stats_from_x);
      return std::vector<Tensor>{gx, gw, gb};
    });
  }
  return y;
}

}  // namespace

Tensor batch_norm_op(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool training, double momentum,
                     double eps) {
  MT_CHECK(x.dim() >= 2, "batch_norm: expected an input of shape [N, C, *], got ", x.shape());
  MT_CHECK(is_floating(x.dtype()), "batch_norm: expected a floating point input, got ", x.dtype());
  const int64_t N = x.size(0), C = x.size(1);
  const int64_t L = N * C == 0 ? 0 : x.numel() / (N * C);
  for (auto [t, what] : {std::pair{&running_mean, "running_mean"},
                         {&running_var, "running_var"},
                         {&weight, "weight"},
                         {&bias, "bias"}})
    check_channel_tensor("batch_norm", what, *t, x, C);
  MT_CHECK(!weight.defined() || !bias.defined() || weight.dtype() == bias.dtype(),
           "batch_norm: expected weight and bias of one dtype, got ", weight.dtype(), " and ",
           bias.dtype());
  MT_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must both be given or both be undefined");
  MT_CHECK(training || running_mean.defined(),
           "batch_norm: running_mean and running_var must be defined in evaluation mode");
  MT_CHECK(!training || N * L > 1,
           "batch_norm: expected more than 1 value per channel when training, got input size ",
           x.shape());
  const NormSets ns{N, C, L, C, /*per_sample=*/false, /*centered=*/true};
  const TensorOptions so = TensorOptions(x.device()).dtype(stat_dtype_of(x.dtype()));
  Tensor xc, mean, rstd;
  {
    autograd::NoGradGuard no_grad;
    xc = x.contiguous();
    if (training) {
      mean = empty(Shape{C}, so);
      rstd = empty(Shape{C}, so);
      const Tensor var = running_var.defined() ? empty(Shape{C}, so) : Tensor();
      norm_stats_kernel(x.device())(mean, rstd, var, xc, ns, eps);
      if (running_mean.defined()) {
        // In place, as PyTorch: the module's buffers are these tensors.
        Tensor rm = running_mean, rv = running_var;
        rm.mul_(1.0 - momentum).add_(mean.to(rm.dtype()), momentum);
        rv.mul_(1.0 - momentum).add_(var.to(rv.dtype()), momentum);
      }
    } else {
      mean = running_mean.to(stat_dtype_of(x.dtype())).clone();
      rstd = (running_var.to(stat_dtype_of(x.dtype())) + eps).rsqrt();
    }
  }
  return apply_norm("NativeBatchNormBackward0", x, xc, mean, rstd, weight, bias, ns, training);
}

Tensor group_norm_op(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                     double eps) {
  MT_CHECK(x.dim() >= 2, "group_norm: expected an input of shape [N, C, *], got ", x.shape());
  MT_CHECK(is_floating(x.dtype()), "group_norm: expected a floating point input, got ", x.dtype());
  const int64_t N = x.size(0), C = x.size(1);
  MT_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: expected the number of channels (",
           C, ") to be divisible by num_groups (", num_groups, "), input of shape ", x.shape());
  const int64_t L = N * C == 0 ? 0 : x.numel() / (N * C);
  check_channel_tensor("group_norm", "weight", weight, x, C);
  check_channel_tensor("group_norm", "bias", bias, x, C);
  const NormSets ns{N, C, L, num_groups, /*per_sample=*/true, /*centered=*/true};
  const TensorOptions so = TensorOptions(x.device()).dtype(stat_dtype_of(x.dtype()));
  Tensor xc, mean = empty(Shape{ns.sets()}, so), rstd = empty(Shape{ns.sets()}, so);
  {
    autograd::NoGradGuard no_grad;
    xc = x.contiguous();
  }
  norm_stats_kernel(x.device())(mean, rstd, Tensor(), xc, ns, eps);
  return apply_norm("NativeGroupNormBackward0", x, xc, mean, rstd, weight, bias, ns, true);
}

Tensor rms_norm_op(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                   std::optional<double> eps) {
  const int64_t k = normalized_shape.size();
  MT_CHECK(k >= 1 && k <= x.dim(), "rms_norm: normalized_shape ", normalized_shape,
           " does not fit an input of shape ", x.shape());
  for (int64_t i = 0; i < k; ++i) {
    MT_CHECK(x.size(x.dim() - k + i) == normalized_shape[i],
             "rms_norm: given normalized_shape=", normalized_shape,
             ", expected input with shape [*, ...", normalized_shape, "], but got input of size ",
             x.shape());
  }
  MT_CHECK(is_floating(x.dtype()), "rms_norm: expected a floating point input, got ", x.dtype());
  if (weight.defined()) {
    MT_CHECK(weight.shape() == normalized_shape, "rms_norm: weight of shape ", weight.shape(),
             " does not match normalized_shape ", normalized_shape);
    MT_CHECK(weight.device() == x.device() && weight.dtype() == x.dtype(),
             "rms_norm: expected weight on ", x.device(), " with dtype ", x.dtype(), ", got ",
             weight.device(), " ", weight.dtype());
  }
  const int64_t D = normalized_shape.numel();
  const int64_t M = D == 0 ? 0 : x.numel() / D;
  // PyTorch's default: the machine epsilon of the dtype the statistics are computed in.
  const double e = eps ? *eps
                       : (x.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                                : double(std::numeric_limits<float>::epsilon()));
  const NormSets ns{M, D, 1, 1, /*per_sample=*/true, /*centered=*/false};
  const TensorOptions so = TensorOptions(x.device()).dtype(stat_dtype_of(x.dtype()));
  Tensor xc, w, rstd = empty(Shape{M}, so);
  {
    autograd::NoGradGuard no_grad;
    xc = x.contiguous();
  }
  norm_stats_kernel(x.device())(Tensor(), rstd, Tensor(), xc, ns, e);
  // The kernels see the weight as [D] per channel.
  if (weight.defined()) w = weight.reshape(Shape{D});
  return apply_norm("RmsNormBackward0", x, xc, Tensor(), rstd, w, Tensor(), ns, true);
}

Tensor layer_norm_op(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                     const Tensor& bias, double eps) {
  check_layer_norm(x, normalized_shape, weight, bias);
  // mean/rstd are saved in opmath (float64 only for a float64 input).
  const int64_t N = normalized_shape.numel();
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  const DType stat_dtype = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  Tensor xc, wc, bc;
  {
    autograd::NoGradGuard no_grad;
    xc = x.contiguous();
    if (weight.defined()) wc = weight.contiguous();
    if (bias.defined()) bc = bias.contiguous();
  }
  Tensor y = empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  Tensor mu = empty(Shape{M}, TensorOptions(x.device()).dtype(stat_dtype));
  Tensor rstd = empty(Shape{M}, TensorOptions(x.device()).dtype(stat_dtype));
  layer_norm_forward_kernel(x.device())(as_rows(y, M, N), mu, rstd, as_rows(xc, M, N),
                                        as_vec(wc, N), as_vec(bc, N), eps);

  if (autograd::Recorder rec{"NativeLayerNormBackward0", {&x, &weight, &bias}}) {
    rec.save(xc).save(wc).save(mu).save(rstd);
    rec.finish(y, [M, N, w_shape = normalized_shape](autograd::BackwardContext& ctx) {
      const Tensor x = ctx.saved(0), w = ctx.saved(1);
      const Tensor g = ctx.grad().contiguous();
      const TensorOptions o = TensorOptions(x.device()).dtype(x.dtype());
      Tensor gx = ctx.needs(0) ? empty(x.shape(), o) : Tensor();
      Tensor gw = ctx.needs(1) ? empty(w_shape, o) : Tensor();
      Tensor gb = ctx.needs(2) ? empty(w_shape, o) : Tensor();
      layer_norm_backward_kernel(x.device())(as_rows(gx, M, N), as_vec(gw, N), as_vec(gb, N),
                                             as_rows(g, M, N), as_rows(x, M, N), ctx.saved(2),
                                             ctx.saved(3), as_vec(w, N));
      return std::vector<Tensor>{gx, gw, gb};
    });
  }
  return y;
}

}  // namespace mantissa
