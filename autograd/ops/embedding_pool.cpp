// embedding and adaptive_avg_pool2d with their backward formulas.
//
// embedding gathers weight rows; its backward sums grad_out rows back into the rows they came
// from (a scatter-add that skips padding_idx), in a fixed order on every device (the kernels'
// contract in engine/kernel_tables.h). Adaptive average pooling uses PyTorch's window bounds
// (kernels/adaptive_pool.h); unbatched [C, H, W] inputs run as a batch of one through recorded
// views.
#include "autograd/autocast_wrapper.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;
using detail::dense;

// ---- embedding ------------------------------------------------------------------------------

Tensor embedding_body(const Tensor& indices, const Tensor& weight,
                      std::optional<int64_t> padding_idx) {
  MT_CHECK(weight.defined() && weight.dim() == 2, "embedding: expected a 2-D weight ",
           "[num_embeddings, embedding_dim], but got weight of size ",
           weight.defined() ? weight.shape() : Shape{});
  MT_CHECK(indices.defined() && (indices.dtype() == kInt64 || indices.dtype() == kInt32),
           "embedding: Expected tensor for argument #1 'indices' to have one of the following ",
           "scalar types: Long, Int; but got ", indices.defined() ? indices.dtype() : kFloat32,
           " instead");
  ops::check_same_device("embedding", weight, indices);
  const int64_t rows = weight.size(0);
  int64_t pad = -1;
  if (padding_idx) {
    MT_CHECK(*padding_idx < rows && *padding_idx >= -rows, "embedding: padding_idx ", *padding_idx,
             " must be within num_embeddings (", rows, ")");
    pad = *padding_idx < 0 ? *padding_idx + rows : *padding_idx;
  }
  const Tensor flat =
      dense(indices.dtype() == kInt64 ? indices : indices.to(kInt64)).view(Shape{indices.numel()});
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.size(1));
  Tensor out = ops::empty_as(Shape{flat.numel(), weight.size(1)}, weight);
  embedding_forward_kernel(weight.device())(out, dense(weight), flat);
  out = out.view(out_shape);
  if (Recorder rec{"EmbeddingBackward0", {&weight}}) {
    rec.save(flat);
    rec.finish(out, [pad, ws = weight.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = dense(ctx.grad());
      Tensor gw = ops::empty_as(ws, g);
      const Tensor& idx = ctx.saved(0);
      embedding_backward_kernel(g.device())(gw, g.view(Shape{idx.numel(), ws[1]}), idx, pad);
      return {gw};
    });
  }
  return out;
}

// ---- adaptive_avg_pool2d --------------------------------------------------------------------

Tensor adaptive_avg_pool2d_batched(const Tensor& input, Size2 output_size) {
  MT_CHECK(output_size.h >= 0 && output_size.w >= 0, "adaptive_avg_pool2d: elements of ",
           "output_size must be greater than or equal to 0 but received {", output_size.h, ", ",
           output_size.w, "}");
  for (int64_t d = 1; d < 4; ++d) {
    MT_CHECK(input.size(d) > 0, "adaptive_avg_pool2d: Expected input to have non-zero size for ",
             "non-batch dimensions, but input has sizes ", input.shape(), " with dimension ", d,
             " being empty");
  }
  const Shape out_shape{input.size(0), input.size(1), output_size.h, output_size.w};
  Tensor out = ops::empty_as(out_shape, input);
  adaptive_avg_pool2d_forward_kernel(input.device())(out, dense(input));
  if (Recorder rec{"AdaptiveAvgPool2DBackward0", {&input}}) {
    rec.finish(out, [xs = input.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = dense(ctx.grad());
      Tensor gx = ops::empty_as(xs, g);
      adaptive_avg_pool2d_backward_kernel(g.device())(gx, g);
      return {gx};
    });
  }
  return out;
}

Tensor adaptive_avg_pool2d_body(const Tensor& input, Size2 output_size) {
  MT_CHECK(input.defined(), "adaptive_avg_pool2d: expected a defined input");
  MT_CHECK(input.dim() == 3 || input.dim() == 4, "adaptive_avg_pool2d: Expected 3D or 4D tensor, ",
           "but got ", input.shape());
  MT_CHECK(is_floating(input.dtype()), "adaptive_avg_pool2d: expected a floating-point input, ",
           "but got ", input.dtype());
  if (input.dim() == 3)
    return adaptive_avg_pool2d_batched(input.unsqueeze(0), output_size).squeeze(0);
  return adaptive_avg_pool2d_batched(input, output_size);
}

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx) {
  return autograd::with_autocast<OpId::embedding>(embedding_body, indices, weight, padding_idx);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size) {
  return autograd::with_autocast<OpId::adaptive_avg_pool2d>(adaptive_avg_pool2d_body, input,
                                                            output_size);
}

}  // namespace mantissa
