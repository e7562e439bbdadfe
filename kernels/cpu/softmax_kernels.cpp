// CPU softmax and log_softmax along one dim, and their backwards.
//
// A tensor is seen as [outer, D, inner] with the softmax over D. Inputs that are not contiguous
// (transposed activations, the stride-0 gradient of a sum) are copied once so that this view is
// dense. The common case, inner == 1 (softmax over the last dim of [N, C] logits), walks each
// row three times in place; inner > 1 keeps a tile of running maxima and sums so every pass
// reads whole contiguous rows of the inner dims.
//
// Numerics: the row max is subtracted before exp; exp runs in opmath (float for the half types,
// rounded once on store), and the row sums accumulate in double. NaN anywhere in a row makes the
// whole row NaN, as in PyTorch.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "engine/factory.h"
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"

namespace mantissa::cpu {
namespace {

constexpr int64_t kMaxTile = 4096;

struct Geometry {
  int64_t outer = 1, d = 1, inner = 1;
};

Geometry geometry(const Tensor& t, int64_t dim) {
  Geometry g;
  if (t.dim() == 0) return g;
  for (int64_t i = 0; i < dim; ++i) g.outer *= t.size(i);
  g.d = t.size(dim);
  for (int64_t i = dim + 1; i < t.dim(); ++i) g.inner *= t.size(i);
  return g;
}

// Width of the tiles the inner dims are cut into when inner > 1: wide, so each row of the inner
// dims is read in long runs, but narrow enough to give every thread work. Never changes results.
int64_t tile_width(const Geometry& g) {
  int64_t tile = std::min(g.inner, kMaxTile);
#if defined(_OPENMP)
  const int64_t want = g.outer * g.d * g.inner >= kParallelGrain ? omp_get_max_threads() : 1;
  if (g.outer * ((g.inner + tile - 1) / tile) < want) {
    const int64_t per_outer = (want + g.outer - 1) / g.outer;
    tile = std::max<int64_t>(64, (g.inner + per_outer - 1) / per_outer);
  }
#endif
  return tile;
}

using mantissa::detail::dense;
using mantissa::detail::with_dense_out;

template <bool Log>
void softmax_cpu(const Tensor& out_in, const Tensor& in_in, int64_t dim) {
  if (in_in.numel() == 0) return;
  const Tensor in = dense(in_in);
  const Geometry g = geometry(in, dim);
  with_dense_out(out_in, [&](const Tensor& out) {
    dispatch_dtype<kFloatingTypes>(
        in.dtype(), Log ? "log_softmax" : "softmax", in.device(), [&](auto tag) {
          using T = typename decltype(tag)::type;
          using M = opmath_t<T>;
          const T* x = static_cast<const T*>(in.data_ptr());
          T* y = static_cast<T*>(out.data_ptr());
          if (g.inner == 1) {
            parallel_tasks(g.outer, g.outer * g.d, [&](int64_t row) {
              const T* xr = x + row * g.d;
              T* yr = y + row * g.d;
              // std::max skips NaN here, but exp(NaN) then poisons the sum and so the whole row.
              M mx = -std::numeric_limits<M>::infinity();
              for (int64_t i = 0; i < g.d; ++i) mx = std::max(mx, M(xr[i]));
              double sum = 0;
              if constexpr (Log) {
                for (int64_t i = 0; i < g.d; ++i) sum += std::exp(M(xr[i]) - mx);
                const M lse = M(std::log(sum));
                for (int64_t i = 0; i < g.d; ++i) yr[i] = T(M(xr[i]) - mx - lse);
              } else if constexpr (std::is_same_v<T, M>) {
                // exp is the cost: keep it in the output and rescale in place.
                for (int64_t i = 0; i < g.d; ++i) {
                  yr[i] = std::exp(xr[i] - mx);
                  sum += yr[i];
                }
                const M inv = M(1.0 / sum);
                for (int64_t i = 0; i < g.d; ++i) yr[i] *= inv;
              } else {
                // Half types: recompute exp rather than round it twice.
                for (int64_t i = 0; i < g.d; ++i) sum += std::exp(M(xr[i]) - mx);
                const M inv = M(1.0 / sum);
                for (int64_t i = 0; i < g.d; ++i) yr[i] = T(std::exp(M(xr[i]) - mx) * inv);
              }
            });
            return;
          }
          const int64_t tile = tile_width(g), tiles = (g.inner + tile - 1) / tile;
          parallel_tasks(g.outer * tiles, g.outer * g.d * g.inner, [&](int64_t task) {
            const int64_t o = task / tiles, j0 = (task % tiles) * tile;
            const int64_t n = std::min(tile, g.inner - j0);
            const T* xb = x + o * g.d * g.inner + j0;
            T* yb = y + o * g.d * g.inner + j0;
            std::vector<M> mx(n, -std::numeric_limits<M>::infinity()), scale(n);
            std::vector<double> sum(n, 0.0);
            constexpr bool kKeepExp = !Log && std::is_same_v<T, M>;
            for (int64_t k = 0; k < g.d; ++k)
              for (int64_t j = 0; j < n; ++j) mx[j] = std::max(mx[j], M(xb[k * g.inner + j]));
            for (int64_t k = 0; k < g.d; ++k) {
              for (int64_t j = 0; j < n; ++j) {
                const M e = std::exp(M(xb[k * g.inner + j]) - mx[j]);
                if constexpr (kKeepExp) yb[k * g.inner + j] = e;
                sum[j] += e;
              }
            }
            // log of the sum for log_softmax, its reciprocal for softmax
            for (int64_t j = 0; j < n; ++j) scale[j] = M(Log ? std::log(sum[j]) : 1.0 / sum[j]);
            for (int64_t k = 0; k < g.d; ++k) {
              for (int64_t j = 0; j < n; ++j) {
                const int64_t i = k * g.inner + j;
                if constexpr (kKeepExp) {
                  yb[i] *= scale[j];
                } else {
                  const M z = M(xb[i]) - mx[j];
                  yb[i] = T(Log ? z - scale[j] : std::exp(z) * scale[j]);
                }
              }
            }
          });
        });
  });
}

// softmax:     grad_in = y * (g - sum(g * y))
// log_softmax: grad_in = g - exp(y) * sum(g)
template <bool Log>
void softmax_backward_cpu(const Tensor& grad_in_out, const Tensor& grad_out_in,
                          const Tensor& output_in, int64_t dim) {
  if (output_in.numel() == 0) return;
  const Tensor go = dense(grad_out_in), out = dense(output_in);
  const Geometry g = geometry(out, dim);
  with_dense_out(grad_in_out, [&](const Tensor& grad_in) {
    dispatch_dtype<kFloatingTypes>(
        out.dtype(), Log ? "log_softmax_backward" : "softmax_backward", out.device(),
        [&](auto tag) {
          using T = typename decltype(tag)::type;
          using M = opmath_t<T>;
          const T* gp = static_cast<const T*>(go.data_ptr());
          const T* yp = static_cast<const T*>(out.data_ptr());
          T* gi = static_cast<T*>(grad_in.data_ptr());
          auto term = [](M gv, M yv) { return Log ? double(gv) : double(gv) * double(yv); };
          auto result = [](M gv, M yv, M s) { return Log ? gv - std::exp(yv) * s : yv * (gv - s); };
          if (g.inner == 1) {
            parallel_tasks(g.outer, g.outer * g.d, [&](int64_t row) {
              const int64_t b = row * g.d;
              double sum = 0;
              for (int64_t i = 0; i < g.d; ++i) sum += term(M(gp[b + i]), M(yp[b + i]));
              const M s = M(sum);
              for (int64_t i = 0; i < g.d; ++i)
                gi[b + i] = T(result(M(gp[b + i]), M(yp[b + i]), s));
            });
            return;
          }
          const int64_t tile = tile_width(g), tiles = (g.inner + tile - 1) / tile;
          parallel_tasks(g.outer * tiles, g.outer * g.d * g.inner, [&](int64_t task) {
            const int64_t o = task / tiles, j0 = (task % tiles) * tile;
            const int64_t n = std::min(tile, g.inner - j0);
            const int64_t b = o * g.d * g.inner + j0;
            std::vector<double> sum(n, 0.0);
            for (int64_t k = 0; k < g.d; ++k)
              for (int64_t j = 0; j < n; ++j) {
                const int64_t i = b + k * g.inner + j;
                sum[j] += term(M(gp[i]), M(yp[i]));
              }
            for (int64_t k = 0; k < g.d; ++k)
              for (int64_t j = 0; j < n; ++j) {
                const int64_t i = b + k * g.inner + j;
                gi[i] = T(result(M(gp[i]), M(yp[i]), M(sum[j])));
              }
          });
        });
  });
}

}  // namespace

MT_REGISTER_KERNEL(softmax_kernel, kCPU, &softmax_cpu<false>);
MT_REGISTER_KERNEL(log_softmax_kernel, kCPU, &softmax_cpu<true>);
MT_REGISTER_KERNEL(softmax_backward_kernel, kCPU, &softmax_backward_cpu<false>);
MT_REGISTER_KERNEL(log_softmax_backward_kernel, kCPU, &softmax_backward_cpu<true>);

}  // namespace mantissa::cpu
