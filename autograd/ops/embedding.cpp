// embedding with its backward formula: it gathers weight rows; its backward sums grad_out rows
// back into the rows they came from (a scatter-add that skips padding_idx), in a fixed order on
// every device (the kernels' contract in engine/kernel_tables.h).
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;
using detail::dense;

// ---- embedding ------------------------------------------------------------------------------

}  // namespace

Tensor embedding_op(const Tensor& indices, const Tensor& weight,
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

}  // namespace mantissa
