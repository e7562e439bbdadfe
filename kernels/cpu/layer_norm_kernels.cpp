// CPU layer norm over the last N elements of each of M contiguous rows, and its backward.
//
// Each row is read twice in the forward (mean, then the centred sum of squares: the two-pass
// variance has no cancellation when |mean| >> std) and once more to write the output. Sums
// accumulate in double for every dtype, so the CPU is the oracle the CUDA kernel is tested
// against; values are read and written through opmath (float for the half types, rounded once on
// store), and mean/rstd are stored in opmath. Rows run in parallel; the weight and bias gradients
// are column sums over all rows, accumulated serially in double in one extra pass.
//
// Backward, with xhat = (x - mean) * rstd and g = grad_out * weight (weight 1 when absent):
//   grad_x = rstd * (g - mean(g) - xhat * mean(g * xhat))     (means over the row)
//   grad_weight = sum over rows of grad_out * xhat,  grad_bias = sum over rows of grad_out.
#include <cmath>
#include <vector>

#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

template <typename T>
const T* ptr_or_null(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}

void layer_norm_forward_cpu(const Tensor& out, const Tensor& mean, const Tensor& rstd,
                            const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  const int64_t N = x.dim() == 0 ? 1 : x.size(-1), M = N == 0 ? 0 : x.numel() / N;
  dispatch_dtype<kFloatingTypes>(x.dtype(), "layer_norm", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    Acc* mp = static_cast<Acc*>(mean.data_ptr());
    Acc* rp = static_cast<Acc*>(rstd.data_ptr());
    const T* wp = ptr_or_null<T>(weight);
    const T* bp = ptr_or_null<T>(bias);
    parallel_tasks(M, M * N, [&](int64_t r) {
      const T* row = xp + r * N;
      double s = 0;
      for (int64_t j = 0; j < N; ++j) s += static_cast<double>(static_cast<Acc>(row[j]));
      const double mu = s / static_cast<double>(N);
      double ss = 0;
      for (int64_t j = 0; j < N; ++j) {
        const double d = static_cast<double>(static_cast<Acc>(row[j])) - mu;
        ss += d * d;
      }
      const Acc m = static_cast<Acc>(mu);
      const Acc rs = static_cast<Acc>(1.0 / std::sqrt(ss / static_cast<double>(N) + eps));
      mp[r] = m;
      rp[r] = rs;
      T* orow = op + r * N;
      for (int64_t j = 0; j < N; ++j) {
        Acc y = (static_cast<Acc>(row[j]) - m) * rs;
        if (wp) y = y * static_cast<Acc>(wp[j]);
        if (bp) y = y + static_cast<Acc>(bp[j]);
        orow[j] = static_cast<T>(y);
      }
    });
  });
}

void layer_norm_backward_cpu(const Tensor& grad_x, const Tensor& grad_weight,
                             const Tensor& grad_bias, const Tensor& grad_out, const Tensor& x,
                             const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t N = x.dim() == 0 ? 1 : x.size(-1), M = N == 0 ? 0 : x.numel() / N;
  dispatch_dtype<kFloatingTypes>(x.dtype(), "layer_norm_backward", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const Acc* mp = static_cast<const Acc*>(mean.data_ptr());
    const Acc* rp = static_cast<const Acc*>(rstd.data_ptr());
    const T* wp = ptr_or_null<T>(weight);
    if (grad_x.defined()) {
      T* dxp = static_cast<T*>(grad_x.data_ptr());
      parallel_tasks(M, M * N, [&](int64_t r) {
        const T* xr = xp + r * N;
        const T* gr = gp + r * N;
        const double m = mp[r], rs = rp[r];
        double sum_g = 0, sum_gx = 0;
        for (int64_t j = 0; j < N; ++j) {
          const double g = static_cast<double>(static_cast<Acc>(gr[j])) *
                           (wp ? static_cast<double>(static_cast<Acc>(wp[j])) : 1.0);
          const double xhat = (static_cast<double>(static_cast<Acc>(xr[j])) - m) * rs;
          sum_g += g;
          sum_gx += g * xhat;
        }
        const double a = sum_g / static_cast<double>(N), b = sum_gx / static_cast<double>(N);
        T* dr = dxp + r * N;
        for (int64_t j = 0; j < N; ++j) {
          const double g = static_cast<double>(static_cast<Acc>(gr[j])) *
                           (wp ? static_cast<double>(static_cast<Acc>(wp[j])) : 1.0);
          const double xhat = (static_cast<double>(static_cast<Acc>(xr[j])) - m) * rs;
          dr[j] = static_cast<T>(static_cast<Acc>(rs * (g - a - xhat * b)));
        }
      });
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      std::vector<double> dw(grad_weight.defined() ? N : 0, 0.0),
          db(grad_bias.defined() ? N : 0, 0.0);
      for (int64_t r = 0; r < M; ++r) {
        const T* xr = xp + r * N;
        const T* gr = gp + r * N;
        const double m = mp[r], rs = rp[r];
        for (int64_t j = 0; j < N; ++j) {
          const double g = static_cast<double>(static_cast<Acc>(gr[j]));
          if (!dw.empty()) dw[j] += g * (static_cast<double>(static_cast<Acc>(xr[j])) - m) * rs;
          if (!db.empty()) db[j] += g;
        }
      }
      if (!dw.empty()) {
        T* p = static_cast<T*>(grad_weight.data_ptr());
        for (int64_t j = 0; j < N; ++j) p[j] = static_cast<T>(static_cast<Acc>(dw[j]));
      }
      if (!db.empty()) {
        T* p = static_cast<T*>(grad_bias.data_ptr());
        for (int64_t j = 0; j < N; ++j) p[j] = static_cast<T>(static_cast<Acc>(db[j]));
      }
    }
  });
}

}  // namespace

MT_REGISTER_KERNEL(layer_norm_forward_kernel, kCPU, &layer_norm_forward_cpu);
MT_REGISTER_KERNEL(layer_norm_backward_kernel, kCPU, &layer_norm_backward_cpu);

}  // namespace mantissa::cpu
