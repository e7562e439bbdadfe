// scaled_dot_product_attention, as torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x):
// softmax(q k^T * scale + mask) v with dropout on the attention weights.
//
// The composed path is written with recorded ops (matmul, masked_fill, softmax, dropout), so its
// gradient comes from their formulas. It defines the op's numerics, including PyTorch's NaN rows
// where a query attends to no key.
#include <cmath>
#include <limits>

#include "autograd/autocast_wrapper.h"
#include "autograd/ops/elementwise_common.h"

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

Tensor sdpa_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                     double dropout_p, bool is_causal, const Checked& c, Generator* gen) {
  const Tensor neg_inf =
      ops::wrap_scalar(-std::numeric_limits<double>::infinity(), q.dtype(), q.device());
  Tensor s = mul(matmul(q, k.transpose(-2, -1)), Scalar(c.scale));
  if (is_causal) s = where(causal_blocked(c.L, c.S, q.device()), neg_inf, s);
  if (mask.defined()) s = mask.dtype() == kBool ? where(mask, s, neg_inf) : add(s, mask);
  Tensor p = softmax(s, -1);
  if (dropout_p > 0.0) p = dropout(p, dropout_p, true, gen);
  return matmul(p, v);
}

Tensor sdpa_body(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                 double dropout_p, bool is_causal, std::optional<double> scale, Generator* gen) {
  const Checked c = check_inputs(q, k, v, attn_mask, dropout_p, is_causal, scale);
  return sdpa_composed(q, k, v, attn_mask, dropout_p, is_causal, c, gen);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  return autograd::with_autocast<OpId::scaled_dot_product_attention>(
      sdpa_body, query, key, value, attn_mask, dropout_p, is_causal, scale, gen);
}

}  // namespace mantissa
