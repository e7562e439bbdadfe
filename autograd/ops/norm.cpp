// layer_norm: one node whose forward and backward are the layer_norm_forward/backward kernels
// over [M, N] rows (M rows of the N normalised elements). Takes autocast's float32 policy.
#include "autograd/autocast_wrapper.h"
#include "autograd/functions.h"
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

Tensor layer_norm_body(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
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

}  // namespace

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return autograd::with_autocast<OpId::layer_norm>(layer_norm_body, x, normalized_shape, weight,
                                                   bias, eps);
}

}  // namespace mantissa
