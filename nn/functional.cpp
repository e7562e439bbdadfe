#include "nn/functional.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "autograd/autocast_wrapper.h"
#include "autograd/function.h"
#include "engine/kernel_tables.h"
#include "engine/logging.h"

namespace mantissa::nn {

Reduction parse_reduction(std::string_view name) {
  if (name == "none") return Reduction::None;
  if (name == "mean") return Reduction::Mean;
  if (name == "sum") return Reduction::Sum;
  MT_THROW("invalid reduction '", name, "' (expected none, mean or sum)");
}

namespace functional {
namespace {

Tensor reduce(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::None:
      return loss;
    case Reduction::Sum:
      return loss.sum();
    case Reduction::Mean:
      return loss.mean();
  }
  return loss;
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  MT_CHECK(is_floating(t.dtype()), op, ": expected a floating point ", what, ", got ", t.dtype());
}

void warn_if_broadcast(const char* op, const Tensor& input, const Tensor& target) {
  if (!(input.shape() == target.shape())) {
    log().warn(
        "{}: using a target size ({}) that is different to the input size ({}); this will "
        "likely lead to incorrect results due to broadcasting",
        op, detail::str_cat(target.shape()), detail::str_cat(input.shape()));
  }
}

}  // namespace

namespace {

Tensor layer_norm_body(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                       const Tensor& bias, double eps) {
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
  // The kernels see [M, N] rows; mean/rstd are saved in opmath (float64 only for float64 input).
  const int64_t N = normalized_shape.numel();
  const int64_t M = N == 0 ? 0 : x.numel() / N;
  const DType stat_dtype = x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  auto rows = [&](const Tensor& t) {
    return detail::make_view(t, Shape{M, N}, Shape{N, 1}, t.storage_offset());
  };
  auto vec = [&](const Tensor& t) {
    return t.defined() ? detail::make_view(t, Shape{N}, Shape{1}, t.storage_offset()) : Tensor();
  };
  Tensor xc, wc, bc;
  {
    autograd::NoGradGuard no_grad;
    xc = x.contiguous();
    if (weight.defined()) wc = weight.contiguous();
    if (bias.defined()) bc = bias.contiguous();
  }
  const TensorOptions opts = TensorOptions(x.device()).dtype(x.dtype());
  Tensor y = empty(x.shape(), opts);
  Tensor mu = empty(Shape{M}, TensorOptions(x.device()).dtype(stat_dtype));
  Tensor rstd = empty(Shape{M}, TensorOptions(x.device()).dtype(stat_dtype));
  layer_norm_forward_kernel(x.device())(rows(y), mu, rstd, rows(xc), vec(wc), vec(bc), eps);

  if (autograd::Recorder rec{"NativeLayerNormBackward0", {&x, &weight, &bias}}) {
    rec.save(xc).save(wc).save(mu).save(rstd);
    rec.finish(y, [M, N, w_shape = normalized_shape](autograd::BackwardContext& ctx) {
      const Tensor x = ctx.saved(0), w = ctx.saved(1);
      const Tensor g = ctx.grad().contiguous();
      const TensorOptions o = TensorOptions(x.device()).dtype(x.dtype());
      Tensor gx = ctx.needs(0) ? empty(x.shape(), o) : Tensor();
      Tensor gw = ctx.needs(1) ? empty(w_shape, o) : Tensor();
      Tensor gb = ctx.needs(2) ? empty(w_shape, o) : Tensor();
      auto rows = [&](const Tensor& t) {
        return t.defined() ? detail::make_view(t, Shape{M, N}, Shape{N, 1}, t.storage_offset())
                           : Tensor();
      };
      auto vec = [&](const Tensor& t) {
        return t.defined() ? detail::make_view(t, Shape{N}, Shape{1}, t.storage_offset())
                           : Tensor();
      };
      layer_norm_backward_kernel(x.device())(rows(gx), vec(gw), vec(gb), rows(g), rows(x),
                                             ctx.saved(2), ctx.saved(3), vec(w));
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

namespace {

// The fused CPU mse_loss (mean or sum of same-shape dense float32/float64 tensors): one forward
// pass and one backward node instead of sub, mul and mean with three nodes. It computes exactly
// what the composition does: diff and diff * diff rounded in T, summed in double in the sum
// kernel's order (8 lanes over chunks of 32768, partials merged in order), and the gradient
// 2 * ((g / n) * diff), which is mul's two gradient contributions of (g / n) * diff added.
constexpr int64_t kMseChunk = 32768;
constexpr int kMseLanes = 8;

template <typename T, typename In>
double mse_fold(const In* a, const T* b, int64_t n) {
  auto sq = [&](int64_t i) {
    const T d = T(a[i]) - b[i];
    return static_cast<double>(T(d * d));
  };
  double acc = 0;
  int64_t i = 0;
  if (n >= 4 * kMseLanes) {
    double lane[kMseLanes] = {};
    for (; i + kMseLanes <= n; i += kMseLanes)
      for (int k = 0; k < kMseLanes; ++k) lane[k] += sq(i + k);
    for (int k = 0; k < kMseLanes; ++k) acc += lane[k];
  }
  for (; i < n; ++i) acc += sq(i);
  return acc;
}

template <typename T, typename In>
T mse_forward(const In* a, const T* b, int64_t n, Reduction reduction) {
  double acc = mse_fold(a, b, std::min(n, kMseChunk));
  for (int64_t c = kMseChunk; c < n; c += kMseChunk)
    acc += mse_fold(a + c, b + c, std::min(kMseChunk, n - c));
  return reduction == Reduction::Mean ? T(acc / double(n)) : T(acc);
}

bool fused_mse_applies(const Tensor& input, const Tensor& target, Reduction reduction) {
  return reduction != Reduction::None && input.device().is_cpu() && target.device().is_cpu() &&
         (input.dtype() == kFloat32 || input.dtype() == kFloat64) &&
         target.dtype() == input.dtype() && input.shape() == target.shape() && input.numel() > 0 &&
         input.is_contiguous() && target.is_contiguous();
}

// The loss computed in T. The node records `input`; `values` holds its values as In: the input
// itself, or for a float16 input autocast widens for this float32 op, its float32 copy (the
// gradient is then float32, and the engine rounds it to float16 as the cast's backward would). A
// bfloat16 input is read widened element by element instead (no copy), and its gradient rounded
// to bfloat16 here, which gives the same bits (bfloat16's conversions are a few bit operations;
// float16's, without F16C in the baseline build, cost more than the copy).
template <typename T, typename In = T>
Tensor fused_mse(const Tensor& input, const Tensor& values, const Tensor& target,
                 Reduction reduction) {
  const int64_t n = values.numel();
  Tensor out = empty(Shape{}, TensorOptions(values.device()).dtype(target.dtype()));
  *static_cast<T*>(out.data_ptr()) =
      mse_forward(static_cast<const In*>(values.data_ptr()),
                  static_cast<const T*>(target.data_ptr()), n, reduction);
  if (autograd::Recorder rec{"MseLossBackward0", {&input, &target}}) {
    rec.save(values).save(target);
    rec.finish(out, [n, reduction](autograd::BackwardContext& ctx) {
      const Tensor x = ctx.saved(0), t = ctx.saved(1);
      const Tensor g = ctx.grad();
      T scale = *static_cast<const T*>(g.data_ptr());
      if (reduction == Reduction::Mean) scale = scale / T(n);
      Tensor gx =
          ctx.needs(0) ? empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype())) : Tensor();
      Tensor gt =
          ctx.needs(1) ? empty(t.shape(), TensorOptions(t.device()).dtype(t.dtype())) : Tensor();
      const In* px = static_cast<const In*>(x.data_ptr());
      const T* pt = static_cast<const T*>(t.data_ptr());
      In* pgx = gx.defined() ? static_cast<In*>(gx.data_ptr()) : nullptr;
      T* pgt = gt.defined() ? static_cast<T*>(gt.data_ptr()) : nullptr;
      // One loop per wanted gradient, each without branches, so that they vectorise.
      const auto grad_at = [&](int64_t i) {
        const T half = scale * T(T(px[i]) - pt[i]);
        return half + half;
      };
      if (pgx != nullptr)
        for (int64_t i = 0; i < n; ++i) pgx[i] = In(grad_at(i));
      if (pgt != nullptr)
        for (int64_t i = 0; i < n; ++i) pgt[i] = -grad_at(i);
      return std::vector<Tensor>{gx, gt};
    });
  }
  return out;
}

Tensor mse_loss_body(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_floating("mse_loss", input, "input");
  warn_if_broadcast("mse_loss", input, target);
  if (fused_mse_applies(input, target, reduction)) {
    return input.dtype() == kFloat32 ? fused_mse<float>(input, input, target, reduction)
                                     : fused_mse<double>(input, input, target, reduction);
  }
  const Tensor diff = input - target;
  return reduce(diff * diff, reduction);
}

Tensor l1_loss_body(const Tensor& input, const Tensor& target, Reduction reduction) {
  check_floating("l1_loss", input, "input");
  warn_if_broadcast("l1_loss", input, target);
  return reduce(abs(input - target), reduction);
}

Tensor nll_loss_body(const Tensor& logp, const Tensor& target, Reduction reduction,
                     int64_t ignore_index) {
  MT_CHECK(logp.dim() >= 1, "nll_loss: input must have at least 1 dimension");
  MT_CHECK(target.dtype() == kInt64 || target.dtype() == kInt32,
           "nll_loss: expected class index "
           "target of dtype int64, got ",
           target.dtype());
  // Unbatched [C] input with a 0-d target, or class dim 1 of [N, C, d1, ...].
  const bool unbatched = logp.dim() == 1;
  const Tensor lp = unbatched ? logp.unsqueeze(0) : logp;
  const Tensor tg = (unbatched ? target.reshape({1}) : target).to(kInt64);
  Shape expected = lp.shape();
  expected.erase(1);
  MT_CHECK(tg.shape() == expected, "nll_loss: expected target of shape ", expected,
           " for input of shape ", logp.shape(), ", got ", target.shape());
  const int64_t classes = lp.size(1);
  const Tensor valid = tg != ignore_index;
  // Targets are range-checked here only where reading them costs no device sync (host memory).
  // On a GPU the loss must not wait for the device, so that a training step can be captured in a
  // CUDA graph: there an out-of-range target makes its loss element and weight NaN instead (below),
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
  const Tensor hit = (tg.unsqueeze(1) == class_index) | out_of_range.unsqueeze(1);
  const Tensor picked = sum(where(hit, lp, 0.0), {1});
  const Tensor weight =
      where(!out_of_range, valid.to(lp.dtype()), std::numeric_limits<double>::quiet_NaN());
  Tensor loss = (0.0 - picked) * weight;
  if (unbatched) loss = loss.squeeze(0);
  if (reduction == Reduction::Mean) return loss.sum() / weight.sum();
  return reduce(loss, reduction);
}

Tensor cross_entropy_body(const Tensor& input, const Tensor& target, Reduction reduction,
                          double label_smoothing, int64_t ignore_index) {
  check_floating("cross_entropy", input, "input");
  MT_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
           "cross_entropy: label_smoothing must "
           "be between 0.0 and 1.0, got ",
           label_smoothing);
  const int64_t class_dim = input.dim() == 1 ? 0 : 1;
  const Tensor logp = mantissa::log_softmax(input, class_dim);
  const int64_t classes = input.size(class_dim);
  if (is_floating(target.dtype())) {  // class probabilities
    MT_CHECK(target.shape() == input.shape(), "cross_entropy: probability target of shape ",
             target.shape(), " must match the input shape ", input.shape());
    Tensor t = target;
    if (label_smoothing > 0.0) t = t * (1.0 - label_smoothing) + label_smoothing / classes;
    return reduce(-sum(logp * t, {class_dim}), reduction);
  }
  Tensor loss = nll_loss_body(logp, target, Reduction::None, ignore_index);
  if (label_smoothing > 0.0) {
    const Tensor valid = (target != ignore_index).to(logp.dtype());
    const Tensor smooth = -sum(logp, {class_dim}) / static_cast<double>(classes) * valid;
    loss = loss * (1.0 - label_smoothing) + smooth * label_smoothing;
  }
  if (reduction == Reduction::Mean) {
    const Tensor valid = (target != ignore_index).to(logp.dtype());
    return loss.sum() / valid.sum();
  }
  return reduce(loss, reduction);
}

Tensor bce_with_logits_body(const Tensor& input, const Tensor& target, Reduction reduction,
                            const Tensor& pos_weight) {
  check_floating("binary_cross_entropy_with_logits", input, "input");
  MT_CHECK(target.shape() == input.shape(), "binary_cross_entropy_with_logits: target size (",
           target.shape(), ") must be the same as input size (", input.shape(), ")");
  // log(1 + exp(-|x|)) + max(-x, 0) is log(1 + exp(-x)) without overflow. Both terms have a
  // kink at x = 0 that cancels; abs' (0) = 0 there, so max must split its gradient at the tie
  // (maximum does; relu' (0) = 0 would give d/dx = 0 instead of -1/2 at x = 0).
  const Tensor zero = zeros({}, TensorOptions(input.device()).dtype(input.dtype()));
  const Tensor log1p_exp_neg = log1p(exp(-abs(input))) + maximum(-input, zero);
  Tensor loss;
  if (pos_weight.defined()) {
    const Tensor log_weight = (pos_weight - 1.0) * target + 1.0;
    loss = (1.0 - target) * input + log_weight * log1p_exp_neg;
  } else {
    loss = (1.0 - target) * input + log1p_exp_neg;
  }
  return reduce(loss, reduction);
}

}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return autograd::with_autocast<OpId::mse_loss>(mse_loss_body, input, target, reduction);
}
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return autograd::with_autocast<OpId::l1_loss>(l1_loss_body, input, target, reduction);
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
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        Reduction reduction, const Tensor& pos_weight) {
  return autograd::with_autocast<OpId::binary_cross_entropy_with_logits>(
      bce_with_logits_body, input, target, reduction, pos_weight);
}

}  // namespace functional
}  // namespace mantissa::nn
