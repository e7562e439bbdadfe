// CPU layer norm over the last N elements of each of M contiguous rows, and its backward.
//
// Each row is read twice in the forward (mean, then the centred sum of squares: the two-pass
// variance has no cancellation when |mean| >> std) and once more to write the output. Sums
// accumulate in double for every dtype, so the CPU is the oracle the CUDA kernel is tested
// against; values are read and written through opmath (float for the half types, rounded once on
// store), and mean/rstd are stored in opmath.
//
// Backward, with xhat = (x - mean) * rstd and g = grad_out * weight (weight 1 when absent):
//   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat))     (means over the row)
//   grad_weight = sum over rows of grad_out * xhat,  grad_bias = sum over rows of grad_out.
//
// Speed: a row's sums run in kLanes independent double partials combined in a fixed order (one
// serial chain of double adds was latency-bound, ~4 ns per element), the row loops are compiled
// per instruction set (the file has no FMA contraction, so every clone rounds alike), rows are
// split across the worker pool, and the weight/bias gradients sum fixed blocks of kRowBlock rows
// in parallel, then the blocks in order: the same bits whatever the thread count or machine.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/kernel_tables.h"
#include "engine/opmath.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/worker_pool.h"

namespace mantissa::cpu {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kRowBlock = 64;

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

template <typename T>
MT_FORCE_INLINE double wide(T v) {
  return static_cast<double>(static_cast<opmath_t<T>>(v));
}

// sum over j < n of f(j), in kLanes partials (j mod kLanes) and a tail.
template <typename Fn>
MT_FORCE_INLINE double lane_sum(int64_t n, const Fn& f) {
  double part[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int u = 0; u < kLanes; ++u) part[u] += f(j + u);
  double tail = 0;
  for (; j < n; ++j) tail += f(j);
  for (int w = kLanes / 2; w >= 1; w /= 2)  // the partials, pairwise in a fixed order
    for (int u = 0; u < w; ++u) part[u] += part[u + w];
  return part[0] + tail;
}

template <typename T>
struct ForwardRows {
  const T* x;
  T* out;
  opmath_t<T>* mean;
  opmath_t<T>* rstd;
  const T* w;
  const T* b;
  int64_t N;
  double eps;
};

template <typename T>
MT_FORCE_INLINE void forward_rows(const ForwardRows<T>& a, int64_t r0, int64_t r1) {
  using Acc = opmath_t<T>;
  const int64_t N = a.N;
  for (int64_t r = r0; r < r1; ++r) {
    const T* row = a.x + r * N;
    const double mu = lane_sum(N, [&](int64_t j) { return wide(row[j]); }) / double(N);
    const double ss = lane_sum(N, [&](int64_t j) {
      const double d = wide(row[j]) - mu;
      return d * d;
    });
    const Acc m = static_cast<Acc>(mu);
    const Acc rs = static_cast<Acc>(1.0 / std::sqrt(ss / double(N) + a.eps));
    a.mean[r] = m;
    a.rstd[r] = rs;
    T* orow = a.out + r * N;
    for (int64_t j = 0; j < N; ++j) {
      Acc y = (static_cast<Acc>(row[j]) - m) * rs;
      if (a.w) y = y * static_cast<Acc>(a.w[j]);
      if (a.b) y = y + static_cast<Acc>(a.b[j]);
      orow[j] = static_cast<T>(y);
    }
  }
}

template <typename T>
struct BackwardRows {
  const T* x;
  const T* g;
  const opmath_t<T>* mean;
  const opmath_t<T>* rstd;
  const T* w;
  T* dx;
  int64_t N;
};

template <typename T>
MT_FORCE_INLINE void backward_rows(const BackwardRows<T>& a, int64_t r0, int64_t r1) {
  using Acc = opmath_t<T>;
  const int64_t N = a.N;
  for (int64_t r = r0; r < r1; ++r) {
    const T* xr = a.x + r * N;
    const T* gr = a.g + r * N;
    const double m = a.mean[r], rs = a.rstd[r];
    auto gw = [&](int64_t j) { return wide(gr[j]) * (a.w ? wide(a.w[j]) : 1.0); };
    const double mean_g = lane_sum(N, gw) / double(N);
    const double mean_gx =
        lane_sum(N, [&](int64_t j) { return gw(j) * ((wide(xr[j]) - m) * rs); }) / double(N);
    T* dr = a.dx + r * N;
    for (int64_t j = 0; j < N; ++j) {
      const double xhat = (wide(xr[j]) - m) * rs;
      dr[j] = static_cast<T>(static_cast<Acc>(rs * (gw(j) - mean_g - xhat * mean_gx)));
    }
  }
}

// Block `blk`'s column sums of grad_out * xhat (into dw, when not null) and of grad_out (db).
template <typename T>
MT_FORCE_INLINE void param_grad_block(const BackwardRows<T>& a, int64_t M, int64_t blk, double* dw,
                                      double* db) {
  const int64_t N = a.N, r1 = std::min(M, (blk + 1) * kRowBlock);
  if (dw != nullptr) std::fill(dw, dw + N, 0.0);
  if (db != nullptr) std::fill(db, db + N, 0.0);
  for (int64_t r = blk * kRowBlock; r < r1; ++r) {
    const T* xr = a.x + r * N;
    const T* gr = a.g + r * N;
    const double m = a.mean[r], rs = a.rstd[r];
    if (dw != nullptr)
      for (int64_t j = 0; j < N; ++j) dw[j] += wide(gr[j]) * ((wide(xr[j]) - m) * rs);
    if (db != nullptr)
      for (int64_t j = 0; j < N; ++j) db[j] += wide(gr[j]);
  }
}

// The row loops compiled for each instruction set; float64 (gradcheck's type) stays on the
// baseline build.
#define MT_LAYER_NORM_ROWS(T, CLONES)                                                            \
  CLONES void forward_rows_isa(const ForwardRows<T>& a, int64_t r0, int64_t r1) {                \
    forward_rows<T>(a, r0, r1);                                                                  \
  }                                                                                              \
  CLONES void backward_rows_isa(const BackwardRows<T>& a, int64_t r0, int64_t r1) {              \
    backward_rows<T>(a, r0, r1);                                                                 \
  }                                                                                              \
  CLONES void param_grad_block_isa(const BackwardRows<T>& a, int64_t M, int64_t blk, double* dw, \
                                   double* db) {                                                 \
    param_grad_block<T>(a, M, blk, dw, db);                                                      \
  }
MT_LAYER_NORM_ROWS(float, MT_CPU_ISA_CLONES)
MT_LAYER_NORM_ROWS(Half, MT_CPU_ISA_CLONES)
MT_LAYER_NORM_ROWS(BFloat16, MT_CPU_ISA_CLONES)
MT_LAYER_NORM_ROWS(double, )
#undef MT_LAYER_NORM_ROWS

void layer_norm_forward_cpu(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                            const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t N = x.dim() == 0 ? 1 : x.size(-1), M = N == 0 ? 0 : x.numel() / N;
  dispatch_dtype<kFloatingTypes>(x.dtype(), "layer_norm", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const ForwardRows<T> a{static_cast<const T*>(x.data_ptr()),
                           static_cast<T*>(out.data_ptr()),
                           static_cast<Acc*>(mean.data_ptr()),
                           static_cast<Acc*>(rstd.data_ptr()),
                           ptr_or_null<T>(weight),
                           ptr_or_null<T>(bias),
                           N,
                           eps};
    parallel_ranges(
        M, [&](int64_t r0, int64_t r1) { forward_rows_isa(a, r0, r1); }, M * N);
  });
}

void layer_norm_backward_cpu(const Tensor& grad_x, const Tensor& grad_weight,
                             const Tensor& grad_bias, const Tensor& grad_out, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t N = x.dim() == 0 ? 1 : x.size(-1), M = N == 0 ? 0 : x.numel() / N;
  dispatch_dtype<kFloatingTypes>(x.dtype(), "layer_norm_backward", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const BackwardRows<T> a{static_cast<const T*>(x.data_ptr()),
                            static_cast<const T*>(grad_out.data_ptr()),
                            static_cast<const Acc*>(mean.data_ptr()),
                            static_cast<const Acc*>(rstd.data_ptr()),
                            ptr_or_null<T>(weight),
                            grad_x.defined() ? static_cast<T*>(grad_x.data_ptr()) : nullptr,
                            N};
    if (grad_x.defined())
      parallel_ranges(
          M, [&](int64_t r0, int64_t r1) { backward_rows_isa(a, r0, r1); }, M * N);
    if (!grad_weight.defined() && !grad_bias.defined()) return;
    // Per block of rows: N sums for the weight, then N for the bias.
    const int64_t blocks = (M + kRowBlock - 1) / kRowBlock;
    const bool want_w = grad_weight.defined(), want_b = grad_bias.defined();
    std::vector<double> part(static_cast<size_t>(blocks * 2 * N));
    auto block_ptr = [&](int64_t blk, int which) { return part.data() + (blk * 2 + which) * N; };
    parallel_ranges(
        blocks,
        [&](int64_t b0, int64_t b1) {
          for (int64_t blk = b0; blk < b1; ++blk)
            param_grad_block_isa(a, M, blk, want_w ? block_ptr(blk, 0) : nullptr,
                                 want_b ? block_ptr(blk, 1) : nullptr);
        },
        M * N);
    auto store = [&](const Tensor& grad, int which) {
      T* p = static_cast<T*>(grad.data_ptr());
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t blk = 0; blk < blocks; ++blk) s += block_ptr(blk, which)[j];
        p[j] = static_cast<T>(static_cast<Acc>(s));
      }
    };
    if (want_w) store(grad_weight, 0);
    if (want_b) store(grad_bias, 1);
  });
}

}  // namespace

MT_REGISTER_KERNEL(layer_norm_forward_kernel, kCPU, &layer_norm_forward_cpu);
MT_REGISTER_KERNEL(layer_norm_backward_kernel, kCPU, &layer_norm_backward_cpu);

}  // namespace mantissa::cpu
