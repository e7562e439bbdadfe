// CPU batch norm, group norm and RMS norm over statistics sets of whole channels (NormSets in
// engine/kernel_tables.h), and their backward.
//
// The statistics are reductions, so they run on the reduction engine (kernels/cpu/reduce.h):
// Welford's mean and M2 for the centred norms, a sum of squares for RMS norm, both accumulated in
// double whatever the dtype and merged in a fixed order, so results never depend on threads.
// mean and rstd are stored in opmath, what the CUDA kernels store too.
//
// The backward needs two sums per set over two tensors (g = grad_out * weight and g * xhat),
// which the one-input engine does not fold, so they are plain double loops per set; the
// parameter gradients are per-channel double sums. Half types are read through float and rounded
// once on store. Weights may be float32 under a float16/bfloat16 input (batch norm keeps its
// parameters and running statistics in float32 under autocast), so parameters are read into
// double once per call.
#include <cmath>
#include <vector>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/reduce.h"

namespace mantissa::cpu {
namespace {

// Sum of squares in double: RMS norm's statistic.
template <typename T>
struct SumSquaresOp {
  using Acc = double;
  Acc init() const { return 0; }
  void step(Acc& a, T x, int64_t) const {
    const double v = static_cast<opmath_t<T>>(x);
    a += v * v;
  }
  void merge(Acc& a, const Acc& b) const { a += b; }
};

// A per-channel parameter as C doubles; empty when undefined.
std::vector<double> load_param(const Tensor& p, int64_t C) {
  std::vector<double> v;
  if (!p.defined()) return v;
  v.resize(C);
  dispatch_dtype<kFloatingTypes>(p.dtype(), "norm parameter", p.device(), [&](auto tag) {
    using P = typename decltype(tag)::type;
    const P* src = static_cast<const P*>(p.data_ptr());
    for (int64_t c = 0; c < C; ++c) v[c] = static_cast<double>(static_cast<opmath_t<P>>(src[c]));
  });
  return v;
}

void store_param(const Tensor& p, const std::vector<double>& v) {
  dispatch_dtype<kFloatingTypes>(p.dtype(), "norm parameter grad", p.device(), [&](auto tag) {
    using P = typename decltype(tag)::type;
    P* dst = static_cast<P*>(p.data_ptr());
    for (size_t c = 0; c < v.size(); ++c) dst[c] = static_cast<P>(static_cast<opmath_t<P>>(v[c]));
  });
}

// Calls f(element offset, channel) for every element of set s.
template <typename F>
void for_set(const NormSets& ns, int64_t s, const F& f) {
  const int64_t cg = ns.C / ns.G;
  const int64_t g = ns.per_sample ? s % ns.G : s;
  const int64_t n0 = ns.per_sample ? s / ns.G : 0, n1 = ns.per_sample ? n0 + 1 : ns.N;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
      const int64_t base = (n * ns.C + c) * ns.L;
      for (int64_t l = 0; l < ns.L; ++l) f(base + l, c);
    }
}

void norm_stats_cpu(const Tensor& mean, const Tensor& rstd, const Tensor& unbiased_var,
                    const Tensor& x, const NormSets& ns, double eps) {
  const int64_t K = ns.C / ns.G * ns.L;  // elements of a set in one sample
  // x as [N, G, K], and the statistics in its keepdim form: [N, G, 1] per sample, [1, G, 1]
  // across the batch.
  const Tensor x3 = mantissa::detail::make_view(x, Shape{ns.N, ns.G, K}, Shape{ns.G * K, K, 1},
                                                x.storage_offset());
  const Tensor layout = mantissa::detail::make_view(rstd, Shape{ns.per_sample ? ns.N : 1, ns.G, 1},
                                                    Shape{ns.G, 1, 1}, rstd.storage_offset());
  dispatch_dtype<kFloatingTypes>(x.dtype(), "norm_stats", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    Acc* rp = static_cast<Acc*>(rstd.data_ptr());
    if (!ns.centered) {
      const double count = static_cast<double>(ns.C * ns.L);
      reduce_engine::reduce<T>(layout, x3, SumSquaresOp<T>{}, [&](int64_t off, double ss) {
        rp[off] = static_cast<Acc>(1.0 / std::sqrt(ss / count + eps));
      });
      return;
    }
    Acc* mp = static_cast<Acc*>(mean.data_ptr());
    Acc* vp = unbiased_var.defined() ? static_cast<Acc*>(unbiased_var.data_ptr()) : nullptr;
    reduce_engine::reduce<T>(layout, x3, reduce_engine::VarOp<T>{},
                             [&](int64_t off, const reduce_engine::Welford& w) {
                               mp[off] = static_cast<Acc>(w.mean);
                               rp[off] = static_cast<Acc>(1.0 / std::sqrt(w.m2 / w.n + eps));
                               if (vp) vp[off] = static_cast<Acc>(w.m2 / (w.n - 1));
                             });
  });
}

void norm_apply_cpu(const Tensor& out, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                    const Tensor& weight, const Tensor& bias, const NormSets& ns) {
  const std::vector<double> w = load_param(weight, ns.C), b = load_param(bias, ns.C);
  dispatch_dtype<kFloatingTypes>(x.dtype(), "norm_apply", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const Acc* mp = mean.defined() ? static_cast<const Acc*>(mean.data_ptr()) : nullptr;
    const Acc* rp = static_cast<const Acc*>(rstd.data_ptr());
    parallel_tasks(ns.N, ns.N * ns.C * ns.L, [&](int64_t n) {
      for (int64_t c = 0; c < ns.C; ++c) {
        const int64_t s = ns.set_of(n, c), base = (n * ns.C + c) * ns.L;
        const Acc m = mp ? mp[s] : Acc(0), r = rp[s];
        const Acc wc = w.empty() ? Acc(1) : static_cast<Acc>(w[c]);
        const Acc bc = b.empty() ? Acc(0) : static_cast<Acc>(b[c]);
        for (int64_t l = 0; l < ns.L; ++l) {
          Acc y = (static_cast<Acc>(xp[base + l]) - m) * r;
          if (!w.empty()) y = y * wc;
          if (!b.empty()) y = y + bc;
          op[base + l] = static_cast<T>(y);
        }
      }
    });
  });
}

void norm_backward_cpu(const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias,
                       const Tensor& grad_out, const Tensor& x, const Tensor& mean,
                       const Tensor& rstd, const Tensor& weight, const NormSets& ns,
                       bool stats_from_x) {
  const std::vector<double> w = load_param(weight, ns.C);
  const int64_t S = ns.sets(), numel = ns.N * ns.C * ns.L;
  dispatch_dtype<kFloatingTypes>(x.dtype(), "norm_backward", x.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = opmath_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    const T* gp = static_cast<const T*>(grad_out.data_ptr());
    const Acc* mp = mean.defined() ? static_cast<const Acc*>(mean.data_ptr()) : nullptr;
    const Acc* rp = static_cast<const Acc*>(rstd.data_ptr());
    auto xhat = [&](int64_t i, int64_t s) {
      return (static_cast<double>(static_cast<Acc>(xp[i])) - (mp ? double(mp[s]) : 0.0)) *
             double(rp[s]);
    };
    auto gw = [&](int64_t i, int64_t c) {
      return static_cast<double>(static_cast<Acc>(gp[i])) * (w.empty() ? 1.0 : w[c]);
    };
    if (grad_x.defined()) {
      // Per set: mean of g (a) and of g * xhat (b), which the statistics pass back to x.
      std::vector<double> a(S, 0.0), b(S, 0.0);
      if (stats_from_x) {
        const double count = static_cast<double>(numel / S);
        parallel_tasks(S, numel, [&](int64_t s) {
          double sg = 0, sgx = 0;
          for_set(ns, s, [&](int64_t i, int64_t c) {
            const double g = gw(i, c);
            sg += g;
            sgx += g * xhat(i, s);
          });
          a[s] = ns.centered ? sg / count : 0.0;
          b[s] = sgx / count;
        });
      }
      T* dxp = static_cast<T*>(grad_x.data_ptr());
      parallel_tasks(ns.N, numel, [&](int64_t n) {
        for (int64_t c = 0; c < ns.C; ++c) {
          const int64_t s = ns.set_of(n, c), base = (n * ns.C + c) * ns.L;
          for (int64_t l = 0; l < ns.L; ++l) {
            const int64_t i = base + l;
            const double d = double(rp[s]) * (gw(i, c) - a[s] - xhat(i, s) * b[s]);
            dxp[i] = static_cast<T>(static_cast<Acc>(d));
          }
        }
      });
    }
    if (grad_weight.defined() || grad_bias.defined()) {
      std::vector<double> dw(grad_weight.defined() ? ns.C : 0, 0.0),
          db(grad_bias.defined() ? ns.C : 0, 0.0);
      parallel_tasks(ns.C, numel, [&](int64_t c) {
        double sw = 0, sb = 0;
        for (int64_t n = 0; n < ns.N; ++n) {
          const int64_t s = ns.set_of(n, c), base = (n * ns.C + c) * ns.L;
          for (int64_t l = 0; l < ns.L; ++l) {
            const double g = static_cast<double>(static_cast<Acc>(gp[base + l]));
            sw += g * xhat(base + l, s);
            sb += g;
          }
        }
        if (!dw.empty()) dw[c] = sw;
        if (!db.empty()) db[c] = sb;
      });
      if (!dw.empty()) store_param(grad_weight, dw);
      if (!db.empty()) store_param(grad_bias, db);
    }
  });
}

}  // namespace

MT_REGISTER_KERNEL(norm_stats_kernel, kCPU, &norm_stats_cpu);
MT_REGISTER_KERNEL(norm_apply_kernel, kCPU, &norm_apply_cpu);
MT_REGISTER_KERNEL(norm_backward_kernel, kCPU, &norm_backward_cpu);

}  // namespace mantissa::cpu
