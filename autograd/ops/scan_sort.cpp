// cumsum/cumprod, topk and sort, with their backward formulas.
//
// cumprod's backward is a kernel that handles zeros in the input (first-order only). cumsum's
// backward is a reversed cumsum (itself recorded, so it can be differentiated again). sort and
// topk send the gradient back to the indices they return (a scatter).
#include <cmath>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

// ---- cumsum and cumprod ---------------------------------------------------------------------
// Inclusive sum along d, forward or reversed; each direction's backward is the other.
Tensor sum_scan(const Tensor& x, int64_t d, bool reverse) {
  Tensor out = ops::empty_on(x.shape(), x.dtype(), x.device());
  cumsum_kernel(x.device())(out, x, d, reverse, /*exclusive=*/false);
  if (is_floating(x.dtype())) {
    if (Recorder rec{"CumsumBackward0", {&x}}) {
      rec.finish(out, [d, reverse](BackwardContext& ctx) -> Grads {
        return {sum_scan(ctx.grad(), d, !reverse)};
      });
    }
  }
  return out;
}

// The input of a scan in the dtype it computes in (not bool: the kernels take numbers).
Tensor scan_input(const Tensor& x, std::optional<DType> dtype) {
  const DType target = ops::integer_promoted(x, dtype);
  MT_CHECK(target != kBool, "cumsum/cumprod: cannot accumulate in ", target);
  return x.dtype() == target ? x : x.to(target);
}

// ---- sort and topk --------------------------------------------------------------------------
// Records the gradient of values = x gathered at `indices` along d: a scatter back.
void record_gather_back(const char* node, const Tensor& x, const Tensor& values,
                        const Tensor& indices, int64_t d) {
  if (!is_floating(x.dtype())) return;
  if (Recorder rec{node, {&x}}) {
    rec.save(indices);
    rec.finish(values, [d, shape = x.shape()](BackwardContext& ctx) -> Grads {
      const Tensor g = ctx.grad();
      if (shape.size() == 0) return {g.reshape(Shape{})};
      return {scatter_add(zeros(shape, TensorOptions(g.device()).dtype(g.dtype())), d, ctx.saved(0),
                          g)};
    });
  }
}

ValuesIndices sorted_along(const Tensor& x, int64_t d, bool descending) {
  Tensor values = ops::empty_on(x.shape(), x.dtype(), x.device());
  Tensor indices = ops::empty_on(x.shape(), kInt64, x.device());
  sort_kernel(x.device())(values, indices, x, d, descending);
  return {values, indices};
}

ValuesIndices sort_body(const Tensor& x, int64_t dim, bool descending) {
  const int64_t d = wrap_dim(dim, x.dim(), "sort");
  ValuesIndices res = sorted_along(x, d, descending);
  record_gather_back("SortBackward0", x, res.values, res.indices, d);
  return res;
}

ValuesIndices topk_body(const Tensor& x, int64_t k, int64_t dim, bool largest) {
  const int64_t d = wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  MT_CHECK(k >= 0 && k <= n, "topk: selected index k out of range (k = ", k, ", dim ", d,
           " of size ", n, " in input ", x.shape(), ")");
  ValuesIndices all = sorted_along(x, d, largest);
  ValuesIndices res = all;
  if (x.dim() > 0 && k < n) {
    autograd::NoGradGuard no_grad;
    res = {all.values.narrow(d, 0, k).contiguous(), all.indices.narrow(d, 0, k).contiguous()};
  }
  record_gather_back("TopkBackward0", x, res.values, res.indices, d);
  return res;
}

}  // namespace

Tensor cumsum_op(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  const int64_t d = wrap_dim(dim, x.dim(), "cumsum");
  return sum_scan(scan_input(x, dtype), d, false);
}

Tensor cumprod_op(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  const int64_t d = wrap_dim(dim, x.dim(), "cumprod");
  const Tensor in = scan_input(x, dtype);
  Tensor out = ops::empty_on(in.shape(), in.dtype(), in.device());
  cumprod_kernel(in.device())(out, in, d, /*reverse=*/false, /*exclusive=*/false);
  if (is_floating(in.dtype())) {
    if (Recorder rec{"CumprodBackward0", {&in}}) {
      rec.save(in).save(out);
      rec.finish(out, [d](BackwardContext& ctx) -> Grads {
        const Tensor x = ctx.saved(0), y = ctx.saved(1);
        Tensor grad_in = ops::empty_on(x.shape(), x.dtype(), x.device());
        cumprod_backward_kernel(x.device())(grad_in, ctx.grad().to(x.dtype()), x, y, d);
        return {grad_in};
      });
    }
  }
  return out;
}

ValuesIndices topk_op(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  return topk_body(x, k, dim, largest);
}

ValuesIndices sort_op(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  return sort_body(x, dim, descending);
}

// ---- Tensor methods -------------------------------------------------------------------------
}  // namespace mantissa
