// softmax and log_softmax along one dim, with backwards that reuse the forward output
// (softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g)) through dedicated kernels, or
// through the differentiable ops under create_graph.
// Both take autocast's float32 policy.
#include "autograd/functions.h"
#include "autograd/op_bodies.h"
#include "autograd/recorder.h"
#include "engine/kernel_tables.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

Tensor softmax_along(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  MT_CHECK(is_floating(x.dtype()), op, ": expected a floating point tensor, got ", x.dtype(),
           " (cast the input first, e.g. x.to(kFloat32))");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor out = empty(x.shape(), TensorOptions(x.device()).dtype(x.dtype()));
  (log ? log_softmax_kernel : softmax_kernel)(x.device())(out, x, d);
  if (Recorder rec{log ? "LogSoftmaxBackward0" : "SoftmaxBackward0", {&x}}) {
    rec.save(out);
    rec.finish(
        out,
        [d, log](BackwardContext& ctx) -> Grads {
          const Tensor y = ctx.saved(0);
          if (ctx.create_graph()) {
            const Tensor g = ctx.grad().to(y.dtype());
            return {log ? g - exp(y) * sum(g, {d}, true) : y * (g - sum(g * y, {d}, true))};
          }
          Tensor grad_in = empty(y.shape(), TensorOptions(y.device()).dtype(y.dtype()));
          (log ? log_softmax_backward_kernel : softmax_backward_kernel)(y.device())(
              grad_in, ctx.grad().to(y.dtype()), y, d);
          return {grad_in};
        },
        autograd::DoubleBackward::Supported);
  }
  return out;
}

}  // namespace

Tensor softmax_op(const Tensor& x, int64_t dim) { return softmax_along(x, dim, false); }
Tensor log_softmax_op(const Tensor& x, int64_t dim) { return softmax_along(x, dim, true); }


}  // namespace mantissa
