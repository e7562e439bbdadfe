// Matrix products: mm, bmm and matmul, with their backward formulas. Every product runs on the
// bmm kernel (2-D operands are passed as one-batch views). matmul is a composition of recorded
// views and mm/bmm, so its gradient (including batch broadcasting) comes from theirs. linear and
// its fused-activation forms are in autograd/ops/linear.cpp (the fused linear kernels).
#include <algorithm>

#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"

namespace mantissa {
namespace {

using autograd::BackwardContext;
using autograd::Recorder;
using Grads = std::vector<Tensor>;

void check_operands(const char* op, const Tensor& a, const Tensor& b) {
  MT_CHECK(a.defined() && b.defined(), op, ": expected defined tensors");
  ops::check_same_device(op, a, b);
  MT_CHECK(a.dtype() == b.dtype(), op,
           ": expected m1 and m2 to have the same dtype, but got: ", a.dtype(), " != ", b.dtype());
}

// A one-batch 3-D view of a matrix (no autograd recording).
Tensor as_batch(const Tensor& m) {
  return detail::make_view(m, Shape{1, m.size(0), m.size(1)}, Shape{0, m.stride(0), m.stride(1)},
                           m.storage_offset());
}

// out[B,M,N] = a[B,M,K] @ b[B,K,N] without recording; shapes already checked.
Tensor bmm_forward(const Tensor& a, const Tensor& b) {
  Tensor out =
      empty(Shape{a.size(0), a.size(1), b.size(2)}, TensorOptions(a.device()).dtype(a.dtype()));
  bmm_kernel(a.device())(out, a, b);
  return out;
}

Tensor mm_forward(const Tensor& a, const Tensor& b) {
  Tensor out = empty(Shape{a.size(0), b.size(1)}, TensorOptions(a.device()).dtype(a.dtype()));
  bmm_kernel(a.device())(as_batch(out), as_batch(a), as_batch(b));
  return out;
}

// Saves what a product's backward reads: each operand only if the other one needs a gradient
// (d/da reads b and d/db reads a), so e.g. a frozen weight does not keep the input alive.
void save_operands(Recorder& rec, const Tensor& a, const Tensor& b) {
  rec.save(b.requires_grad() ? a : Tensor()).save(a.requires_grad() ? b : Tensor());
}

Shape drop_last(const Shape& s, int64_t n) {
  Shape out = s;
  out.resize(s.size() - n);
  return out;
}

}  // namespace

Tensor mm_op(const Tensor& a, const Tensor& b) {
  check_operands("mm", a, b);
  MT_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D matrices, got ", a.dim(), "-D ",
           a.shape(), " and ", b.dim(), "-D ", b.shape());
  MT_CHECK(a.size(1) == b.size(0), "mm: mat1 and mat2 shapes cannot be multiplied (", a.shape(),
           " and ", b.shape(), ")");
  Tensor out = mm_forward(a, b);
  if (is_floating(out.dtype())) {
    if (Recorder rec{"MmBackward0", {&a, &b}}) {
      save_operands(rec, a, b);
      rec.finish(
          out,
          [](BackwardContext& ctx) -> Grads {
            const Tensor g = ctx.grad();
            return {ctx.needs(0) ? mm(g, ctx.saved(1).t()) : Tensor(),
                    ctx.needs(1) ? mm(ctx.saved(0).t(), g) : Tensor()};
          },
          autograd::DoubleBackward::Supported);
    }
  }
  return out;
}

Tensor bmm_op(const Tensor& a, const Tensor& b) {
  check_operands("bmm", a, b);
  MT_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got ", a.dim(), "-D ",
           a.shape(), " and ", b.dim(), "-D ", b.shape());
  MT_CHECK(a.size(0) == b.size(0), "bmm: batch sizes must match, got ", a.shape(), " and ",
           b.shape());
  MT_CHECK(a.size(2) == b.size(1), "bmm: batch1 and batch2 shapes cannot be multiplied (",
           a.shape(), " and ", b.shape(), ")");
  Tensor out = bmm_forward(a, b);
  if (is_floating(out.dtype())) {
    if (Recorder rec{"BmmBackward0", {&a, &b}}) {
      save_operands(rec, a, b);
      rec.finish(
          out,
          [](BackwardContext& ctx) -> Grads {
            const Tensor g = ctx.grad();
            return {ctx.needs(0) ? bmm(g, ctx.saved(1).transpose(1, 2)) : Tensor(),
                    ctx.needs(1) ? bmm(ctx.saved(0).transpose(1, 2), g) : Tensor()};
          },
          autograd::DoubleBackward::Supported);
    }
  }
  return out;
}

// torch.matmul: a 1-D operand gains a dim (rows for a, columns for b) that the result drops
// again; dims before the last two are batch dims and broadcast.
Tensor matmul_op(const Tensor& a, const Tensor& b) {
  check_operands("matmul", a, b);
  MT_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need to be at least 1D, but ",
           "they are ", a.dim(), "D and ", b.dim(), "D");
  const int64_t k_a = a.size(-1), k_b = b.dim() == 1 ? b.size(0) : b.size(-2);
  MT_CHECK(k_a == k_b, "matmul: shapes cannot be multiplied (", a.shape(), " and ", b.shape(),
           "): inner dimensions ", k_a, " and ", k_b, " differ");
  const int64_t K = k_a;

  if (a.dim() == 1 && b.dim() == 1) return mm(a.unsqueeze(0), b.unsqueeze(1)).reshape(Shape{});
  if (a.dim() <= 2 && b.dim() <= 2) {
    const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
    const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Tensor out = mm(a2, b2);
    if (a.dim() == 1) return out.squeeze(0);
    if (b.dim() == 1) return out.squeeze(1);
    return out;
  }
  if (b.dim() <= 2) {
    // Fold a's batch dims into its rows: one GEMM instead of a batch of small ones.
    const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
    Shape out_shape = drop_last(a.shape(), 1);
    const int64_t rows = out_shape.numel();
    if (b.dim() == 2) out_shape.push_back(b.size(1));
    return mm(a.reshape(Shape{rows, K}), b2).reshape(out_shape);
  }

  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t M = a2.size(-2), N = b2.size(-1);
  const Shape batch_a = drop_last(a2.shape(), 2), batch_b = drop_last(b2.shape(), 2);
  for (int64_t i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i) {
    const int64_t da = batch_a[batch_a.size() - i], db = batch_b[batch_b.size() - i];
    MT_CHECK(da == db || da == 1 || db == 1, "matmul: batch dimensions of ", a.shape(), " and ",
             b.shape(), " cannot be broadcast together");
  }
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  Shape ea = batch, eb = batch, eo = batch;
  ea.push_back(M);
  ea.push_back(K);
  eb.push_back(K);
  eb.push_back(N);
  eo.push_back(M);
  eo.push_back(N);
  // Broadcast batch dims stay stride 0 after the reshape when they can (no copy), and the bmm
  // kernel reads a stride-0 batch directly.
  const int64_t nb = batch.numel();
  Tensor out = bmm(a2.expand(ea).reshape(Shape{nb, M, K}), b2.expand(eb).reshape(Shape{nb, K, N}))
                   .reshape(eo);
  if (a.dim() == 1) return out.squeeze(-2);
  if (b.dim() == 1) return out.squeeze(-1);
  return out;
}


}  // namespace mantissa
