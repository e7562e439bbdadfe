// CPU scaled_dot_product_attention, flash-attention style: no [L, S] matrix is ever built, only
// one [kQueryTile, kKeyBlock] block of scores per task at a time.
//
// Forward: each task takes one (batch x head, tile of kQueryTile queries) and walks the keys in
// blocks of kKeyBlock: the block's scores come from one small GEMM (Q_tile K_block^T), then per
// query a running max m, a running sum l of exp(s - m) and an unnormalised output row are updated
// (a new block rescales them by exp(m_old - m_new)), and a second GEMM adds P V_block to the
// output rows. A query whose keys so far are all masked keeps m = -inf and skips the block
// (exp(-inf - -inf) would poison the row); if that lasts to the end its row is NaN, as softmax
// over all -inf is.
//
// Backward (flash-attention-2): one task per batch x head walks the key blocks and, for each, the
// query tiles: it recomputes P = exp(s - lse) and accumulates dV += P_d^T dO, dS = P (dP - D),
// dQ += dS K and dK += dS^T Q with the same small GEMMs, in opmath buffers, so every sum runs in a
// fixed order whatever the thread count. Dropout masks are not stored: both passes regenerate
// them from the Philox counter of each (b, i, j).
//
// Every operand is first copied into an opmath buffer whose rows are padded to whole vectors
// (float16/bfloat16 compute in float and round once on store, as the other kernels), so the GEMM
// below needs no tail handling. Tasks run on the worker pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/kernel_tables.h"
#include "engine/opmath.h"
#include "engine/philox.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/philox_batch.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/vectorizable_math.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kQueryTile = 64;
constexpr int64_t kKeyBlock = 64;
constexpr int64_t kVectorBytes = 64;
// Multiply-adds from which a call is split across the worker pool.
constexpr int64_t kPoolMacs = int64_t(1) << 20;

// n rounded up to whole vectors of M.
template <typename M>
int64_t padded(int64_t n) {
  constexpr int64_t w = kVectorBytes / sizeof(M);
  return (n + w - 1) / w * w;
}

// Rows i0..i0+4 (clamped to m; the extra rows compute row m-1 again and are not stored) times
// NV vectors of columns from j: 4 x NV accumulators, each a chain of multiply-adds in p order.
// NV vectors per B row load amortise the 4 broadcasts of A, and 4 x NV independent chains cover
// the multiply-add latency (with one vector, 4 chains left the FMA units half idle).
template <typename M, int NV>
__attribute__((always_inline)) inline void block_tile(int64_t m, int64_t k, const M* const* a,
                                                      int64_t a_col, const M* B, int64_t ldb, M* C,
                                                      int64_t ldc, int64_t i0, int64_t j,
                                                      bool accumulate) {
  typedef M Vec __attribute__((vector_size(kVectorBytes)));
  constexpr int64_t kRows = 4;
  constexpr int64_t w = kVectorBytes / sizeof(M);
  Vec acc[kRows][NV];
  for (int64_t r = 0; r < kRows; ++r) {
    for (int v = 0; v < NV; ++v) {
      if (accumulate && i0 + r < m)
        acc[r][v] = *reinterpret_cast<const Vec*>(C + (i0 + r) * ldc + j + v * w);
      else
        acc[r][v] = Vec{};
    }
  }
  for (int64_t p = 0; p < k; ++p) {
    Vec b[NV];
    for (int v = 0; v < NV; ++v) b[v] = *reinterpret_cast<const Vec*>(B + p * ldb + j + v * w);
    const int64_t ap = p * a_col;
    for (int64_t r = 0; r < kRows; ++r) {
      const M x = a[r][ap];
      for (int v = 0; v < NV; ++v) acc[r][v] += x * b[v];
    }
  }
  for (int64_t r = 0; r < kRows && i0 + r < m; ++r)
    for (int v = 0; v < NV; ++v)
      *reinterpret_cast<Vec*>(C + (i0 + r) * ldc + j + v * w) = acc[r][v];
}

// C[i, 0:n) (+)= sum over p < k of A[i * a_row + p * a_col] * B[p * ldb + 0:n), for i < m, with n,
// ldb and ldc whole vectors and B and C vector-aligned. Four rows and up to four vectors of
// columns at a time; every element is one chain of multiply-adds in p order, whatever the tiling.
template <typename M>
__attribute__((always_inline)) inline void block_gemm_body(int64_t m, int64_t n, int64_t k,
                                                           const M* A, int64_t a_row, int64_t a_col,
                                                           const M* B, int64_t ldb, M* C,
                                                           int64_t ldc, bool accumulate) {
  constexpr int64_t kRows = 4;
  constexpr int64_t w = kVectorBytes / sizeof(M);
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const M* a[kRows];
    for (int64_t r = 0; r < kRows; ++r) a[r] = A + std::min(i0 + r, m - 1) * a_row;
    int64_t j = 0;
    for (; j + 4 * w <= n; j += 4 * w)
      block_tile<M, 4>(m, k, a, a_col, B, ldb, C, ldc, i0, j, accumulate);
    switch ((n - j) / w) {
      case 3:
        block_tile<M, 3>(m, k, a, a_col, B, ldb, C, ldc, i0, j, accumulate);
        break;
      case 2:
        block_tile<M, 2>(m, k, a, a_col, B, ldb, C, ldc, i0, j, accumulate);
        break;
      case 1:
        block_tile<M, 1>(m, k, a, a_col, B, ldb, C, ldc, i0, j, accumulate);
        break;
      default:
        break;
    }
  }
}

MT_CPU_AVX512_CLONES void block_gemm(int64_t m, int64_t n, int64_t k, const float* A, int64_t a_row,
                                     int64_t a_col, const float* B, int64_t ldb, float* C,
                                     int64_t ldc, bool accumulate) {
  block_gemm_body(m, n, k, A, a_row, a_col, B, ldb, C, ldc, accumulate);
}

// float64 (gradcheck's type) stays on the baseline build, the same bits on every machine.
void block_gemm(int64_t m, int64_t n, int64_t k, const double* A, int64_t a_row, int64_t a_col,
                const double* B, int64_t ldb, double* C, int64_t ldc, bool accumulate) {
  block_gemm_body(m, n, k, A, a_row, a_col, B, ldb, C, ldc, accumulate);
}

// A vector-aligned opmath buffer of rows padded to whole vectors, zero in the padding.
template <typename M>
class Rows {
 public:
  Rows(int64_t rows, int64_t cols) : ld_(padded<M>(cols)), data_(rows * ld_ + kSlack, M(0)) {
    base_ = data_.data();
    while (reinterpret_cast<uintptr_t>(base_) % kVectorBytes != 0) ++base_;
  }
  M* row(int64_t i) { return base_ + i * ld_; }
  const M* row(int64_t i) const { return base_ + i * ld_; }
  M* data() { return base_; }
  int64_t ld() const { return ld_; }
  void zero() { std::fill(data_.begin(), data_.end(), M(0)); }

 private:
  static constexpr int64_t kSlack = kVectorBytes / sizeof(M);
  int64_t ld_;
  std::vector<M> data_;
  M* base_;
};

// rows x cols values of src (row stride cols) into dst's first rows, converted to opmath.
template <typename T, typename M>
MT_FORCE_INLINE void load_rows(Rows<M>& dst, const T* src, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    M* d = dst.row(i);
    const T* s = src + i * cols;
    for (int64_t e = 0; e < cols; ++e) d[e] = M(s[e]);
  }
}
// The transpose of rows x cols values of src: dst row e holds column e.
template <typename T, typename M>
MT_FORCE_INLINE void load_transposed(Rows<M>& dst, const T* src, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    const T* s = src + i * cols;
    for (int64_t e = 0; e < cols; ++e) dst.row(e)[i] = M(s[e]);
  }
}

template <typename M>
MT_FORCE_INLINE M exp_opmath(M x) {
  if constexpr (std::is_same_v<M, float>) {
    return vmath::exp_f32(x);
  } else {
    return std::exp(x);
  }
}

// Eight partial maxima and sums, so that the compiler keeps them in vector registers; combined in
// a fixed order.
template <typename M>
MT_FORCE_INLINE M row_max(const M* x, int64_t n) {
  M part[8];
  std::fill(part, part + 8, -std::numeric_limits<M>::infinity());
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) part[u] = std::max(part[u], x[c + u]);  // NaN never wins
  for (; c < n; ++c) part[0] = std::max(part[0], x[c]);
  return std::max(std::max(std::max(part[0], part[4]), std::max(part[1], part[5])),
                  std::max(std::max(part[2], part[6]), std::max(part[3], part[7])));
}
template <typename T, typename M>
MT_FORCE_INLINE M dot(const T* x, const T* y, int64_t n) {
  M part[8] = {};
  int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int u = 0; u < 8; ++u) part[u] += M(x[e + u]) * M(y[e + u]);
  M tail = 0;
  for (; e < n; ++e) tail += M(x[e]) * M(y[e]);
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7])) +
         tail;
}

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
  // Kept where the double uniform is below 1 - p, compared as integers (no branch, vectors).
  uint64_t keep_bound = 0;

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
    if (a.dropout_p > 0) {
      keep_scale = a.dropout_p < 1 ? M(1.0 / (1.0 - a.dropout_p)) : M(0);
      keep_bound = philox_bits53_bound(1.0 - a.dropout_p);
    }
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
  // Row i's scores s = dot * scale (masked: -inf, or plus the additive mask) for keys j0 + c,
  // c < cols, in place over the dot products.
  MT_FORCE_INLINE void scores(M* s, int64_t moff, int64_t i, int64_t j0, int64_t cols) const {
    const M scale = M(a.scale), neg_inf = -std::numeric_limits<M>::infinity();
    // Keys from `visible` on are hidden by the causal mask.
    const int64_t visible = a.causal ? std::clamp<int64_t>(i + 1 - j0, 0, cols) : cols;
    for (int64_t c = 0; c < cols; ++c) s[c] = c < visible ? s[c] * scale : neg_inf;
    if (bool_mask != nullptr) {
      const bool* mrow = bool_mask + moff + i * mask_si + j0 * mask_sj;
      for (int64_t c = 0; c < visible; ++c)
        if (!mrow[c * mask_sj]) s[c] = neg_inf;
    } else if (add_mask != nullptr) {
      const T* mrow = add_mask + moff + i * mask_si + j0 * mask_sj;
      for (int64_t c = 0; c < visible; ++c) s[c] += M(mrow[c * mask_sj]);
    }
  }
  // The factors dropout multiplies P[b, i, j0 + c] by, c < kKeyBlock (those past the last key
  // are not used): 0 or 1 / (1 - p), from Philox counter (b * L + i) * S + j of the op's stream.
  void dropout_factors(M* __restrict factor, int64_t b, int64_t i, int64_t j0) const {
    static_assert(kKeyBlock == kPhiloxBatch);
    PhiloxBatch r;
    philox4x32_batch(a.rng.seed, a.rng.offset + static_cast<uint64_t>((b * L + i) * S + j0), r);
    const uint64_t bound = keep_bound;
    const M scale = keep_scale;
    for (int c = 0; c < kKeyBlock; ++c)
      factor[c] = philox_bits53(r.w[0][c], r.w[1][c]) < bound ? scale : M(0);
  }
};

template <typename Fn>
void run_tasks(int64_t tasks, int64_t macs, const Fn& fn) {
  if (macs >= kPoolMacs) {
    parallel_in_pool(tasks, fn);
  } else {
    for (int64_t t = 0; t < tasks; ++t) fn(t);
  }
}

template <typename T>
MT_FORCE_INLINE void forward_task(const AttentionForwardArgs& a,
                                  const ScoreRules<T, opmath_t<T>>& rules, int64_t task) {
  using M = opmath_t<T>;
  constexpr M kNegInf = -std::numeric_limits<M>::infinity();
  const int64_t L = rules.L, S = rules.S, E = a.q.size(2), Ev = a.v.size(2);
  const T* q = static_cast<const T*>(a.q.data_ptr());
  const T* k = static_cast<const T*>(a.k.data_ptr());
  const T* v = static_cast<const T*>(a.v.data_ptr());
  T* out = static_cast<T*>(a.out.data_ptr());
  M* lse = static_cast<M*>(a.lse.data_ptr());
  const bool dropout = a.dropout_p > 0;
  const int64_t tiles = (L + kQueryTile - 1) / kQueryTile;
  const int64_t b = task / tiles, i0 = (task % tiles) * kQueryTile;
  const int64_t rows = std::min(kQueryTile, L - i0);
  const int64_t moff = a.mask.defined() ? rules.mask_offset(b) : 0;
  Rows<M> qt(rows, E), kt(E, kKeyBlock), vb(kKeyBlock, Ev), s(rows, kKeyBlock), acc(rows, Ev);
  M keep[kKeyBlock];  // one row's dropout factors
  load_rows(qt, q + (b * L + i0) * E, rows, E);
  std::vector<M> m(static_cast<size_t>(rows), kNegInf), l(static_cast<size_t>(rows), M(0));
  for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
    if (a.causal && j0 > i0 + rows - 1) break;  // every key from here on is hidden
    const int64_t cols = std::min(kKeyBlock, S - j0);
    load_transposed(kt, k + (b * S + j0) * E, cols, E);
    load_rows(vb, v + (b * S + j0) * Ev, cols, Ev);
    block_gemm(rows, s.ld(), E, qt.data(), qt.ld(), 1, kt.data(), kt.ld(), s.data(), s.ld(), false);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = i0 + r;
      M* sr = s.row(r);
      rules.scores(sr, moff, i, j0, cols);
      const M m_new = std::max(m[r], row_max(sr, cols));
      if (m_new == kNegInf) {  // no visible key yet: this block adds nothing to the row
        std::fill(sr, sr + cols, M(0));
        continue;
      }
      const M alpha = std::exp(m[r] - m_new);
      M* ar = acc.row(r);
      l[r] *= alpha;
      for (int64_t e = 0; e < acc.ld(); ++e) ar[e] *= alpha;
      // 16 partial sums: one 512-bit vector of floats per step where the CPU has them.
      M part[16] = {};
      int64_t c = 0;
      for (; c + 16 <= cols; c += 16)
        for (int u = 0; u < 16; ++u) part[u] += sr[c + u] = exp_opmath(sr[c + u] - m_new);
      for (; c < cols; ++c) part[0] += sr[c] = exp_opmath(sr[c] - m_new);
      for (int w = 8; w >= 1; w /= 2)
        for (int u = 0; u < w; ++u) part[u] += part[u + w];
      l[r] += part[0];
      if (dropout) {
        rules.dropout_factors(keep, b, i, j0);
        for (c = 0; c < cols; ++c) sr[c] *= keep[c];
      }
      m[r] = m_new;
    }
    block_gemm(rows, acc.ld(), cols, s.data(), s.ld(), 1, vb.data(), vb.ld(), acc.data(), acc.ld(),
               true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r;
    const M inv = M(1) / l[r];  // l = 0 (no key): 0 * inf gives the NaN row
    const M* ar = acc.row(r);
    T* o = out + (b * L + i) * Ev;
    for (int64_t e = 0; e < Ev; ++e) o[e] = T(ar[e] * inv);
    lse[b * L + i] = l[r] > 0 ? m[r] + std::log(l[r]) : std::numeric_limits<M>::quiet_NaN();
  }
}

template <typename T>
MT_FORCE_INLINE void backward_task(const AttentionBackwardArgs& g,
                                   const ScoreRules<T, opmath_t<T>>& rules, int64_t b) {
  using M = opmath_t<T>;
  const AttentionForwardArgs& a = g.fwd;
  const int64_t L = rules.L, S = rules.S, E = a.q.size(2), Ev = a.v.size(2);
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
  const int64_t moff = a.mask.defined() ? rules.mask_offset(b) : 0;
  Rows<M> qm(L, E), dom(L, Ev), dq(L, E);
  Rows<M> kb(kKeyBlock, E), kt(E, kKeyBlock), vt(Ev, kKeyBlock), dk(kKeyBlock, E),
      dv(kKeyBlock, Ev);
  Rows<M> p(kQueryTile, kKeyBlock), ds(kQueryTile, kKeyBlock);
  M keep[kKeyBlock];  // one row's dropout factors
  load_rows(qm, q + b * L * E, L, E);
  load_rows(dom, dout + b * L * Ev, L, Ev);
  const M* lse_b = lse + b * L;
  std::vector<M> d(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i)
    d[i] = dot<T, M>(dout + (b * L + i) * Ev, out + (b * L + i) * Ev, Ev);
  for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
    const int64_t cols = std::min(kKeyBlock, S - j0);
    load_rows(kb, k + (b * S + j0) * E, cols, E);
    load_transposed(kt, k + (b * S + j0) * E, cols, E);
    load_transposed(vt, v + (b * S + j0) * Ev, cols, Ev);
    dk.zero();
    dv.zero();
    for (int64_t i0 = 0; i0 < L; i0 += kQueryTile) {
      const int64_t rows = std::min(kQueryTile, L - i0);
      // A tile whose keys here are all hidden adds nothing, unless one of its rows has a NaN
      // lse (no visible key at all), whose NaN the composed math spreads to every gradient.
      if (a.causal && j0 > i0 + rows - 1 &&
          std::none_of(lse_b + i0, lse_b + i0 + rows, [](M x) { return std::isnan(x); }))
        continue;
      block_gemm(rows, p.ld(), E, qm.row(i0), qm.ld(), 1, kt.data(), kt.ld(), p.data(), p.ld(),
                 false);
      block_gemm(rows, ds.ld(), Ev, dom.row(i0), dom.ld(), 1, vt.data(), vt.ld(), ds.data(),
                 ds.ld(), false);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        M* pr = p.row(r);
        M* dsr = ds.row(r);
        rules.scores(pr, moff, i, j0, cols);
        const M li = lse_b[i], di = d[i];
        for (int64_t c = 0; c < cols; ++c) pr[c] = exp_opmath(pr[c] - li);
        if (dropout) {
          rules.dropout_factors(keep, b, i, j0);
          for (int64_t c = 0; c < cols; ++c) {
            dsr[c] = pr[c] * (dsr[c] * keep[c] - di);
            pr[c] *= keep[c];
          }
        } else {
          for (int64_t c = 0; c < cols; ++c) dsr[c] = pr[c] * (dsr[c] - di);
        }
        if (gmask != nullptr)
          for (int64_t c = 0; c < cols; ++c) gmask[(b * L + i) * S + j0 + c] = T(dsr[c]);
        for (int64_t c = 0; c < cols; ++c) dsr[c] *= scale;
        std::fill(pr + cols, pr + p.ld(), M(0));
        std::fill(dsr + cols, dsr + ds.ld(), M(0));
      }
      block_gemm(cols, dv.ld(), rows, p.data(), 1, p.ld(), dom.row(i0), dom.ld(), dv.data(),
                 dv.ld(), true);
      block_gemm(rows, dq.ld(), cols, ds.data(), ds.ld(), 1, kb.data(), kb.ld(), dq.row(i0),
                 dq.ld(), true);
      block_gemm(cols, dk.ld(), rows, ds.data(), 1, ds.ld(), qm.row(i0), qm.ld(), dk.data(),
                 dk.ld(), true);
    }
    for (int64_t c = 0; c < cols; ++c) {
      T* gkj = gk + (b * S + j0 + c) * E;
      T* gvj = gv + (b * S + j0 + c) * Ev;
      for (int64_t e = 0; e < E; ++e) gkj[e] = T(dk.row(c)[e]);
      for (int64_t e = 0; e < Ev; ++e) gvj[e] = T(dv.row(c)[e]);
    }
  }
  for (int64_t i = 0; i < L; ++i)
    for (int64_t e = 0; e < E; ++e) gq[(b * L + i) * E + e] = T(dq.row(i)[e]);
}

// The tasks compiled for each instruction set: their score, exp and conversion loops are long
// enough for the widest vectors to pay. float64 keeps the baseline build (gradcheck's type).
#define MT_ATTENTION_TASKS(T)                                                                \
  MT_CPU_ISA_CLONES void forward_task_isa(const AttentionForwardArgs& a,                     \
                                          const ScoreRules<T, opmath_t<T>>& r, int64_t t) {  \
    forward_task<T>(a, r, t);                                                                \
  }                                                                                          \
  MT_CPU_ISA_CLONES void backward_task_isa(const AttentionBackwardArgs& g,                   \
                                           const ScoreRules<T, opmath_t<T>>& r, int64_t b) { \
    backward_task<T>(g, r, b);                                                               \
  }
MT_ATTENTION_TASKS(float)
MT_ATTENTION_TASKS(Half)
MT_ATTENTION_TASKS(BFloat16)
#undef MT_ATTENTION_TASKS
void forward_task_isa(const AttentionForwardArgs& a, const ScoreRules<double, double>& r,
                      int64_t t) {
  forward_task<double>(a, r, t);
}
void backward_task_isa(const AttentionBackwardArgs& g, const ScoreRules<double, double>& r,
                       int64_t b) {
  backward_task<double>(g, r, b);
}

template <typename T>
void forward_typed(const AttentionForwardArgs& a) {
  const ScoreRules<T, opmath_t<T>> rules(a);
  const int64_t B = a.q.size(0), L = rules.L, S = rules.S, E = a.q.size(2), Ev = a.v.size(2);
  const int64_t tiles = (L + kQueryTile - 1) / kQueryTile;
  run_tasks(B * tiles, B * L * S * (E + Ev),
            [&](int64_t task) { forward_task_isa(a, rules, task); });
}

template <typename T>
void backward_typed(const AttentionBackwardArgs& g) {
  const ScoreRules<T, opmath_t<T>> rules(g.fwd);
  const int64_t B = g.fwd.q.size(0), L = rules.L, S = rules.S, E = g.fwd.q.size(2),
                Ev = g.fwd.v.size(2);
  run_tasks(B, B * L * S * (2 * E + 2 * Ev), [&](int64_t b) { backward_task_isa(g, rules, b); });
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
