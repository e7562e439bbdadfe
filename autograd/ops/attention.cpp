// scaled_dot_product_attention, as torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x):
// softmax(q k^T * scale + mask) v with dropout on the attention weights.
//
// The device's kernel (engine/kernel_tables.h; on the CPU a flash-attention style loop that
// never builds an [L, S] matrix) computes the output and each row's logsumexp, and the recorded
// node's backward recomputes the probabilities from it. A kernel may decline a case (the CUDA
// one takes only what its fused kernel handles); the op then runs the composed path: matmul,
// the additive bias, softmax, dropout and matmul as recorded ops, differentiated by their own
// formulas. Both give PyTorch's NaN row where a query may attend to no key.
#include <array>
#include <cmath>
#include <limits>

#include "autograd/kept_kernel_outputs.h"
#include "autograd/op_bodies.h"
#include "autograd/ops/elementwise_common.h"
#include "engine/graph_capture.h"

namespace mantissa {
namespace {

struct Checked {
  int64_t L = 0, S = 0, E = 0;
  double scale = 1.0;
};

Checked check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     double dropout_p, bool is_causal, std::optional<double> scale) {
  constexpr const char* op = "scaled_dot_product_attention";
  MT_CHECK(q.defined() && k.defined() && v.defined(), op, ": expected defined query, key, value");
  MT_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, op, ": expected query, key and value ",
           "of at least 2 dims [..., L, E], got ", q.shape(), ", ", k.shape(), " and ", v.shape());
  MT_CHECK(is_floating(q.dtype()) && q.dtype() == k.dtype() && q.dtype() == v.dtype(), op,
           ": expected query, key and value of one floating dtype, got ", q.dtype(), ", ",
           k.dtype(), " and ", v.dtype());
  ops::check_same_device(op, q, k);
  ops::check_same_device(op, q, v);
  MT_CHECK(q.size(-1) == k.size(-1), op, ": expected query and key of one embedding size E, got ",
           q.shape(), " and ", k.shape());
  MT_CHECK(k.size(-2) == v.size(-2), op, ": expected key and value of one sequence length S, got ",
           k.shape(), " and ", v.shape());
  MT_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op, ": dropout_p has to be between 0 and 1, ",
           "but got ", dropout_p);
  MT_CHECK(!(is_causal && mask.defined()), op,
           ": Explicit attn_mask should not be set when is_causal=True");
  Checked c{q.size(-2), k.size(-2), q.size(-1), 1.0};
  if (mask.defined()) {
    ops::check_same_device(op, q, mask);
    MT_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(), op,
             ": expected attn_mask of dtype bool or the query's dtype ", q.dtype(), ", got ",
             mask.dtype());
    Shape scores = broadcast_shapes(Shape(q.shape().begin(), q.shape().end() - 2),
                                    Shape(k.shape().begin(), k.shape().end() - 2), op);
    scores.push_back(c.L);
    scores.push_back(c.S);
    MT_CHECK(broadcast_shapes(scores, mask.shape(), op) == scores, op, ": attn_mask of shape ",
             mask.shape(), " does not broadcast to the attention weights' shape ", scores);
  }
  c.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(c.E));
  return c;
}

// True where query i may not attend key j (j > i): the causal mask, top-left aligned.
Tensor causal_blocked(int64_t L, int64_t S, Device device) {
  const TensorOptions idx = TensorOptions(device).dtype(kInt64);
  return gt(arange(S, idx).view(Shape{1, S}), arange(L, idx).view(Shape{L, 1}));
}

// The scores' additive bias, as PyTorch documents the op: -inf where the causal mask hides a key
// or a bool mask is false, else the float mask (undefined when there is none).
Tensor score_bias(const Tensor& mask, bool is_causal, const Checked& c, DType dtype,
                  Device device) {
  const Tensor neg_inf = ops::wrap_scalar(-std::numeric_limits<double>::infinity(), dtype, device);
  if (is_causal) return where(causal_blocked(c.L, c.S, device), neg_inf, Scalar(0.0));
  if (!mask.defined()) return Tensor();
  return mask.dtype() == kBool ? where(logical_not(mask), neg_inf, Scalar(0.0)) : mask;
}

// The op as recorded ops, which differentiate it.
Tensor sdpa_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     double dropout_p, bool is_causal, const Checked& c, Generator* gen) {
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), Scalar(c.scale));
  const Tensor bias = score_bias(mask, is_causal, c, q.dtype(), q.device());
  if (bias.defined()) s = add(s, bias);
  Tensor p = softmax(s, -1);
  if (dropout_p > 0.0) p = dropout(p, dropout_p, true, gen);
  return matmul(p, v);
}

// The backward from the forward's lse with recorded-free ops in opmath, for a device whose
// backward kernel declines the case: P = exp(s - lse), then flash-attention-2's formulas.
// Materialises [B, L, S]. Dropout never reaches it (no kernel declines a backward whose
// forward it ran with dropout).
void backward_composed(AttentionBackwardArgs& g, const Checked& c) {
  const AttentionForwardArgs& a = g.fwd;
  MT_CHECK(a.dropout_p == 0.0, "scaled_dot_product_attention: internal error: no backward for ",
           "dropout on ", a.q.device());
  const DType m = a.lse.dtype();
  const int64_t B = a.q.size(0);
  const Tensor q = a.q.to(m), k = a.k.to(m), v = a.v.to(m), o = a.out.to(m);
  const Tensor dout = g.grad_out.to(m);
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), Scalar(c.scale));
  const Tensor mask =
      a.mask.defined() ? detail::dense(a.mask).reshape(Shape{B, c.L, c.S}) : Tensor();
  const Tensor bias = score_bias(mask, a.causal, c, m, q.device());
  if (bias.defined()) s = add(s, bias.to(m));
  const Tensor p = exp(sub(s, a.lse.unsqueeze(-1)));
  const Tensor ds = mul(p, sub(matmul(dout, v.transpose(-2, -1)), sum(mul(dout, o), {-1}, true)));
  g.grad_v.copy_(matmul(p.transpose(-2, -1), dout));
  g.grad_q.copy_(mul(matmul(ds, k), Scalar(c.scale)));
  g.grad_k.copy_(mul(matmul(ds.transpose(-2, -1), q), Scalar(c.scale)));
  if (g.grad_mask.defined()) g.grad_mask.copy_(ds);
}

Shape with_rows(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

}  // namespace

Tensor scaled_dot_product_attention_op(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& attn_mask, double dropout_p, bool is_causal,
                                       std::optional<double> scale, Generator* gen) {
  const Checked c = check_inputs(q, k, v, attn_mask, dropout_p, is_causal, scale);
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0)
    return sdpa_composed(q, k, v, attn_mask, dropout_p, is_causal, c, gen);
  constexpr const char* op = "scaled_dot_product_attention";
  const auto batch_of = [](const Tensor& t) {
    return Shape(t.shape().begin(), t.shape().end() - 2);
  };
  const Shape batch =
      broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), op), batch_of(v), op);
  int64_t B = 1;
  for (int64_t d : batch) B *= d;
  const int64_t Ev = v.size(-1);
  const auto flat = [&](const Tensor& t, int64_t rows) {
    return detail::dense(ops::broadcast_view(t, with_rows(batch, rows, t.size(-1))))
        .view(Shape{B, rows, t.size(-1)});
  };
  AttentionForwardArgs a;
  a.q = flat(q, c.L);
  a.k = flat(k, c.S);
  a.v = flat(v, c.S);
  if (attn_mask.defined()) a.mask = ops::broadcast_view(attn_mask, with_rows(batch, c.L, c.S));
  Tensor out = ops::empty_as(with_rows(batch, c.L, Ev), q);
  a.out = out.view(Shape{B, c.L, Ev});
  a.lse = empty(Shape{B, c.L},
                TensorOptions(q.device()).dtype(q.dtype() == kFloat64 ? kFloat64 : kFloat32));
  a.causal = is_causal;
  a.scale = c.scale;
  a.dropout_p = dropout_p;
  Generator& g = gen != nullptr ? *gen : default_generator(q.device());
  if (dropout_p > 0.0) {
    detail::not_capturable(q.device(), detail::Uncapturable::RandomDraw,
                           "scaled_dot_product_attention's dropout");
    a.rng = g.advance(static_cast<uint64_t>(B * c.L * c.S));
  }
  // Under a checkpoint that keeps this op's outputs, its recomputation copies them back instead
  // of running the kernel (autograd/kept_kernel_outputs.h); the node below is recorded alike.
  const bool handled =
      autograd::run_keepable_kernel("scaled_dot_product_attention", {a.out, a.lse},
                                    [&a, &q] { return attention_forward_kernel(q.device())(a); });
  if (!handled) {
    if (dropout_p > 0.0) g.set_state(a.rng.seed, a.rng.offset);
    return sdpa_composed(q, k, v, attn_mask, dropout_p, is_causal, c, gen);
  }
  if (autograd::Recorder rec{"ScaledDotProductAttentionBackward0", {&q, &k, &v, &attn_mask}}) {
    rec.save(a.q).save(a.k).save(a.v).save(out).save(a.lse);
    if (a.mask.defined()) rec.save(a.mask);
    const bool float_mask = attn_mask.defined() && attn_mask.dtype() != kBool;
    AttentionForwardArgs meta;
    meta.causal = is_causal;
    meta.scale = c.scale;
    meta.dropout_p = dropout_p;
    meta.rng = a.rng;
    const std::array<Shape, 4> shapes{q.shape(), k.shape(), v.shape(),
                                      attn_mask.defined() ? attn_mask.shape() : Shape{}};
    rec.finish(
        out,
        [c, B, Ev, batch, meta, shapes, has_mask = a.mask.defined(),
         float_mask](autograd::BackwardContext& ctx) -> std::vector<Tensor> {
          AttentionBackwardArgs g;
          g.fwd = meta;
          g.fwd.q = ctx.saved(0);
          g.fwd.k = ctx.saved(1);
          g.fwd.v = ctx.saved(2);
          g.fwd.out = detail::dense(ctx.saved(3)).view(Shape{B, c.L, Ev});
          g.fwd.lse = ctx.saved(4);
          if (has_mask) g.fwd.mask = ctx.saved(5);
          g.grad_out = detail::dense(ctx.grad().to(g.fwd.q.dtype())).view(Shape{B, c.L, Ev});
          g.grad_q = ops::empty_as(g.fwd.q.shape(), g.fwd.q);
          g.grad_k = ops::empty_as(g.fwd.k.shape(), g.fwd.k);
          g.grad_v = ops::empty_as(g.fwd.v.shape(), g.fwd.v);
          if (float_mask && ctx.needs(3))
            g.grad_mask =
                zeros(Shape{B, c.L, c.S}, TensorOptions(g.fwd.q.device()).dtype(g.fwd.q.dtype()));
          if (!attention_backward_kernel(g.fwd.q.device())(g)) backward_composed(g, c);
          const auto back = [&](const Tensor& grad, int64_t rows, size_t i) {
            if (!ctx.needs(i)) return Tensor();
            return autograd::sum_to(grad.view(with_rows(batch, rows, grad.size(-1))), shapes[i]);
          };
          return {back(g.grad_q, c.L, 0), back(g.grad_k, c.S, 1), back(g.grad_v, c.S, 2),
                  g.grad_mask.defined() ? back(g.grad_mask, c.L, 3) : Tensor()};
        });
  }
  return out;
}

}  // namespace mantissa
