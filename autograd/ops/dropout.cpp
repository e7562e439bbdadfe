// Dropout (inverted, as torch.nn.functional.dropout): while training, each element is kept with
// probability 1-p and scaled by 1/(1-p), so the expected value is unchanged and evaluation needs
// no rescaling. The mask is drawn in x's dtype on x's device and pre-scaled, as PyTorch does, so
// forward and backward are one multiply each and backward saves only the mask.
#include "autograd/ops/elementwise_common.h"

namespace mantissa {

Tensor dropout_op(const Tensor& x, double p, bool training, Generator* gen) {
  MT_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  MT_CHECK(x.defined(), "dropout: expected a defined tensor");
  if (!training || p == 0.0) return x;
  MT_CHECK(is_floating(x.dtype()), "dropout: expected a floating point tensor, got ", x.dtype());
  // Multiplying by zero (rather than returning zeros) keeps x in the graph, with zero gradient.
  if (p == 1.0) return x * ops::wrap_scalar(0, x.dtype(), x.device());

  Tensor mask = empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  bernoulli_(mask, 1.0 - p, gen);
  {
    autograd::NoGradGuard no_grad;
    mask.mul_(Scalar(1.0 / (1.0 - p)));
  }
  Tensor out = empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  mul_kernel(x.device())(out, x, mask);
  if (autograd::Recorder rec{"NativeDropoutBackward0", {&x}}) {
    rec.save(mask);
    rec.finish(
        out,
        [](autograd::BackwardContext& ctx) -> std::vector<Tensor> {
          return {ctx.grad() * ctx.saved(0)};
        },
        autograd::DoubleBackward::Supported);
  }
  return out;
}

}  // namespace mantissa
