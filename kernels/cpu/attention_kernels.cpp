// CPU scaled_dot_product_attention, flash-attention style: no [L, S] matrix is ever built.
//
// Forward: each task takes one (batch x head, tile of kQueryTile queries) and walks the keys in
// blocks of kKeyBlock, keeping per query a running max m, a running sum l of exp(s - m) and an
// unnormalised output row; a new block rescales them by exp(m_old - m_new). The scratch is one
// [kQueryTile, kKeyBlock] block of scores. A query whose keys so far are all masked keeps m = -inf
// and skips the block (exp(-inf - -inf) would poison the row); if that lasts to the end its row
// is NaN, as softmax over all -inf is.
//
// Backward (flash-attention-2): one task per batch x head recomputes P = exp(s - lse) a key
// block at a time and accumulates dQ, dK, dV in opmath buffers, so sums run in a fixed order
// whatever the thread count. Dropout masks are not stored: both passes regenerate them from
// the Philox counter of each (b, i, j).
//
// float16/bfloat16 compute in float (opmath_t) and round once on store, as the other kernels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/kernel_tables.h"
#include "engine/opmath.h"
#include "engine/philox.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kQueryTile = 32;
constexpr int64_t kKeyBlock = 64;

// Reads the mask and the dropout decision of element (b, i, j); shared by both passes so that
// they see the same scores.
template <typename T, typename M>
struct ScoreRules {
  const AttentionForwardArgs& a;
  int64_t L, S;
  const bool* bool_mask = nullptr;
  const T* add_mask = nullptr;
  int64_t mask_si = 0, mask_sj = 0;
  M keep_scale = 1;

  explicit ScoreRules(const AttentionForwardArgs& args)
      : a(args), L(args.q.size(1)), S(args.k.size(1)) {
    if (a.mask.defined()) {
      mask_si = a.mask.stride(-2);
      mask_sj = a.mask.stride(-1);
      if (a.mask.dtype() == kBool)
        bool_mask = static_cast<const bool*>(a.mask.data_ptr());
      else
        add_mask = static_cast<const T*>(a.mask.data_ptr());
    }
    if (a.dropout_p > 0) keep_scale = a.dropout_p < 1 ? M(1.0 / (1.0 - a.dropout_p)) : M(0);
  }
  // Where batch b's [L, S] mask starts: b unravelled over the mask's batch dims.
  int64_t mask_offset(int64_t b) const {
    int64_t off = 0;
    for (int64_t d = a.mask.dim() - 3; d >= 0; --d) {
      off += (b % a.mask.size(d)) * a.mask.stride(d);
      b /= a.mask.size(d);
    }
    return off;
  }
  bool hidden(int64_t i, int64_t j) const { return a.causal && j > i; }
  // s from the dot product q_i . k_j; -inf where masked.
  M score(M dot, int64_t moff, int64_t i, int64_t j) const {
    if (hidden(i, j)) return -std::numeric_limits<M>::infinity();
    M s = dot * M(a.scale);
    if (bool_mask != nullptr && !bool_mask[moff + i * mask_si + j * mask_sj])
      return -std::numeric_limits<M>::infinity();
    if (add_mask != nullptr) s += M(add_mask[moff + i * mask_si + j * mask_sj]);
    return s;
  }
  // The factor dropout multiplies P[b, i, j] by: 0 or 1 / (1 - p).
  M dropout_factor(int64_t b, int64_t i, int64_t j) const {
    const uint64_t counter = a.rng.offset + static_cast<uint64_t>((b * L + i) * S + j);
    const Philox4 r = philox4x32(a.rng.seed, counter);
    return philox_uniform01_double(r.v[0], r.v[1]) < 1.0 - a.dropout_p ? keep_scale : M(0);
  }
};

// Eight partial sums, so the compiler can keep them in one vector register (a single running sum
// is a chain of dependent adds); combined in a fixed order.
template <typename T, typename M>
M dot(const T* x, const T* y, int64_t n) {
  M part[8] = {};
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int u = 0; u < 8; ++u) part[u] += M(x[e + u]) * M(y[e + u]);
  M tail = 0;
  for (; e < n; ++e) tail += M(x[e]) * M(y[e]);
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7])) +
         tail;
}

template <typename T>
void forward_typed(const AttentionForwardArgs& a) {
  using M = opmath_t<T>;
  const ScoreRules<T, M> rules(a);
  const int64_t B = a.q.size(0), L = rules.L, S = rules.S, E = a.q.size(2), Ev = a.v.size(2);
  const T* q = static_cast<const T*>(a.q.data_ptr());
  const T* k = static_cast<const T*>(a.k.data_ptr());
  const T* v = static_cast<const T*>(a.v.data_ptr());
  T* out = static_cast<T*>(a.out.data_ptr());
  M* lse = static_cast<M*>(a.lse.data_ptr());
  const bool dropout = a.dropout_p > 0;
  const int64_t tiles = (L + kQueryTile - 1) / kQueryTile;
  parallel_tasks(B * tiles, B * L * S * (E + Ev) * 8, [&](int64_t task) {
    const int64_t b = task / tiles, i0 = (task % tiles) * kQueryTile;
    const int64_t rows = std::min(kQueryTile, L - i0);
    const int64_t moff = a.mask.defined() ? rules.mask_offset(b) : 0;
    const T* kb = k + b * S * E;
    const T* vb = v + b * S * Ev;
    std::vector<M> s(static_cast<size_t>(rows * kKeyBlock)), acc(static_cast<size_t>(rows * Ev));
    std::vector<M> m(static_cast<size_t>(rows), -std::numeric_limits<M>::infinity());
    std::vector<M> l(static_cast<size_t>(rows), M(0));
    for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
      if (a.causal && j0 > i0 + rows - 1) break;  // every key from here on is hidden
      const int64_t cols = std::min(kKeyBlock, S - j0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const T* qi = q + (b * L + i) * E;
        M* sr = s.data() + r * kKeyBlock;
        M block_max = -std::numeric_limits<M>::infinity();
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = j0 + c;
          sr[c] = rules.hidden(i, j) ? -std::numeric_limits<M>::infinity()
                                     : rules.score(dot<T, M>(qi, kb + j * E, E), moff, i, j);
          block_max = std::max(block_max, sr[c]);  // NaN never wins; it poisons l below
        }
        const M m_new = std::max(m[r], block_max);
        if (m_new == -std::numeric_limits<M>::infinity()) continue;
        const M alpha = std::exp(m[r] - m_new);
        M* ar = acc.data() + r * Ev;
        l[r] *= alpha;
        for (int64_t e = 0; e < Ev; ++e) ar[e] *= alpha;
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = j0 + c;
          M p = std::exp(sr[c] - m_new);
          l[r] += p;
          if (dropout) p *= rules.dropout_factor(b, i, j);
          const T* vj = vb + j * Ev;
          for (int64_t e = 0; e < Ev; ++e) ar[e] += p * M(vj[e]);
        }
        m[r] = m_new;
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      const M inv = M(1) / l[r];  // l = 0 (no key): 0 * inf gives the NaN row
      const M* ar = acc.data() + r * Ev;
      T* o = out + (b * L + i) * Ev;
      for (int64_t e = 0; e < Ev; ++e) o[e] = T(ar[e] * inv);
      lse[b * L + i] = l[r] > 0 ? m[r] + std::log(l[r]) : std::numeric_limits<M>::quiet_NaN();
    }
  });
}

template <typename T>
void backward_typed(const AttentionBackwardArgs& g) {
  using M = opmath_t<T>;
  const AttentionForwardArgs& a = g.fwd;
  const ScoreRules<T, M> rules(a);
  const int64_t B = a.q.size(0), L = rules.L, S = rules.S, E = a.q.size(2), Ev = a.v.size(2);
  const T* q = static_cast<const T*>(a.q.data_ptr());
  const T* k = static_cast<const T*>(a.k.data_ptr());
  const T* v = static_cast<const T*>(a.v.data_ptr());
  const T* out = static_cast<const T*>(a.out.data_ptr());
  const T* dout = static_cast<const T*>(g.grad_out.data_ptr());
  const M* lse = static_cast<const M*>(a.lse.data_ptr());
  T* gq = static_cast<T*>(g.grad_q.data_ptr());
  T* gk = static_cast<T*>(g.grad_k.data_ptr());
  T* gv = static_cast<T*>(g.grad_v.data_ptr());
  T* gmask = g.grad_mask.defined() ? static_cast<T*>(g.grad_mask.data_ptr()) : nullptr;
  const bool dropout = a.dropout_p > 0;
  const M scale = M(a.scale);
  parallel_tasks(B, B * L * S * (2 * E + 2 * Ev) * 8, [&](int64_t b) {
    const int64_t moff = a.mask.defined() ? rules.mask_offset(b) : 0;
    std::vector<M> dq(static_cast<size_t>(L * E), M(0)), dk(static_cast<size_t>(S * E), M(0));
    std::vector<M> dv(static_cast<size_t>(S * Ev), M(0)), d(static_cast<size_t>(L));
    for (int64_t i = 0; i < L; ++i)
      d[i] = dot<T, M>(dout + (b * L + i) * Ev, out + (b * L + i) * Ev, Ev);
    for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
      const int64_t cols = std::min(kKeyBlock, S - j0);
      for (int64_t i = 0; i < L; ++i) {
        const T* qi = q + (b * L + i) * E;
        const T* doi = dout + (b * L + i) * Ev;
        const M li = lse[b * L + i];
        M* dqi = dq.data() + i * E;
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t j = j0 + c;
          // A hidden key has P = 0 and adds nothing, unless the row's lse is NaN (a row with no
          // key), whose NaN the composed math spreads to every gradient it touches.
          if (rules.hidden(i, j) && !std::isnan(li)) continue;
          const T* kj = k + (b * S + j) * E;
          const T* vj = v + (b * S + j) * Ev;
          const M p = std::exp(rules.score(dot<T, M>(qi, kj, E), moff, i, j) - li);
          const M keep = dropout ? rules.dropout_factor(b, i, j) : M(1);
          M* dvj = dv.data() + j * Ev;
          const M pd = p * keep;
          for (int64_t e = 0; e < Ev; ++e) dvj[e] += pd * M(doi[e]);
          const M ds = p * (dot<T, M>(doi, vj, Ev) * keep - d[i]);
          if (gmask != nullptr) gmask[(b * L + i) * S + j] = T(ds);
          const M dss = ds * scale;
          M* dkj = dk.data() + j * E;
          for (int64_t e = 0; e < E; ++e) {
            dqi[e] += dss * M(kj[e]);
            dkj[e] += dss * M(qi[e]);
          }
        }
      }
    }
    for (int64_t x = 0; x < L * E; ++x) gq[b * L * E + x] = T(dq[x]);
    for (int64_t x = 0; x < S * E; ++x) gk[b * S * E + x] = T(dk[x]);
    for (int64_t x = 0; x < S * Ev; ++x) gv[b * S * Ev + x] = T(dv[x]);
  });
}

bool attention_forward_cpu(const AttentionForwardArgs& a) {
  dispatch_dtype<kFloatingTypes>(a.q.dtype(), "scaled_dot_product_attention", a.q.device(),
                                 [&](auto tag) { forward_typed<typename decltype(tag)::type>(a); });
  return true;
}

bool attention_backward_cpu(const AttentionBackwardArgs& g) {
  dispatch_dtype<kFloatingTypes>(
      g.fwd.q.dtype(), "scaled_dot_product_attention_backward", g.fwd.q.device(),
      [&](auto tag) { backward_typed<typename decltype(tag)::type>(g); });
  return true;
}

}  // namespace

MT_REGISTER_KERNEL(attention_forward_kernel, kCPU, &attention_forward_cpu);
MT_REGISTER_KERNEL(attention_backward_kernel, kCPU, &attention_backward_cpu);

}  // namespace mantissa::cpu
