// CUDA scaled_dot_product_attention: cuDNN's flash attention first (kernels/cuda/
// cudnn_attention.cpp), then an in-house fused forward for float16/bfloat16 with head dims 64 and
// 128, and the composed path for everything else.
//
// The fused kernel is the plain online softmax, kept simple on purpose: one thread block per
// (batch x head, tile of kRows queries), one warp per query. A block stages kKeys keys and values
// at a time in shared memory; each lane holds D / 32 elements of its query and of the output
// accumulator in float, a warp shuffle sums the dot products, and per key the running max m,
// the running sum l and the accumulator are rescaled by exp(m_old - m_new). The output rounds
// once on store; lse = m + log(l) is kept (float32) for the backward.
//
// What it does not take (float32/float64, other head dims, an explicit mask, dropout) declines
// with a reason counted in engine/fast_path_stats.h (path "cuda.attention"), and the op runs its
// composed path (bmm -> additive mask -> softmax -> dropout -> bmm with the CUDA kernels of those
// ops), which is also the reference the fused kernel is tested against. The backward of a fused
// forward is not fused: it declines too, and the op recomputes the weights from lse with composed
// ops in float32.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "engine/fast_path_stats.h"
#include "engine/kernel_tables.h"
#include "kernels/cuda/cudnn_attention.h"
#include "kernels/cuda/loops.cuh"

namespace mantissa::cuda {
namespace {

constexpr int kRows = 8;   // queries (warps) per block
constexpr int kKeys = 64;  // keys staged in shared memory at a time

template <typename T, int D>
__global__ void __launch_bounds__(kRows * 32)
    attention_forward_fused(const T* __restrict__ q, const T* __restrict__ k,
                            const T* __restrict__ v, T* __restrict__ out, float* __restrict__ lse,
                            int64_t L, int64_t S, float scale, bool causal) {
  constexpr int kPer = D / 32;
  __shared__ T ks[kKeys * D];
  __shared__ T vs[kKeys * D];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t b = blockIdx.y;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t i = first + warp;
  const bool active = i < L;
  const T* kb = k + b * S * D;
  const T* vb = v + b * S * D;

  float qr[kPer], acc[kPer];
  const T* qi = q + (b * L + (active ? i : 0)) * D;
  for (int r = 0; r < kPer; ++r) {
    qr[r] = static_cast<float>(qi[lane + 32 * r]);
    acc[r] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int64_t last = (first + kRows < L ? first + kRows : L) - 1;
  const int64_t key_end = causal ? (last + 1 < S ? last + 1 : S) : S;
  for (int64_t j0 = 0; j0 < key_end; j0 += kKeys) {
    const int n = static_cast<int>(key_end - j0 < kKeys ? key_end - j0 : kKeys);
    __syncthreads();  // the previous tile is no longer read
    for (int x = static_cast<int>(threadIdx.x); x < n * D; x += kRows * 32) {
      ks[x] = kb[j0 * D + x];
      vs[x] = vb[j0 * D + x];
    }
    __syncthreads();
    if (!active) continue;  // whole warps: the shuffles below see all 32 lanes
    for (int c = 0; c < n; ++c) {
      if (causal && j0 + c > i) break;
      float dot = 0.f;
      for (int r = 0; r < kPer; ++r) dot += qr[r] * static_cast<float>(ks[c * D + lane + 32 * r]);
      for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const float s = dot * scale;
      const float m_new = fmaxf(m, s);  // a NaN score keeps m, and poisons l and acc below
      const float alpha = expf(m - m_new), p = expf(s - m_new);
      l = l * alpha + p;
      for (int r = 0; r < kPer; ++r)
        acc[r] = acc[r] * alpha + p * static_cast<float>(vs[c * D + lane + 32 * r]);
      m = m_new;
    }
  }
  if (!active) return;
  const float inv = 1.f / l;
  T* o = out + (b * L + i) * D;
  for (int r = 0; r < kPer; ++r) o[lane + 32 * r] = static_cast<T>(acc[r] * inv);
  if (lane == 0) lse[b * L + i] = l > 0.f ? m + logf(l) : NAN;
}

template <typename T, int D>
void launch_fused(const AttentionForwardArgs& a) {
  const int64_t B = a.q.size(0), L = a.q.size(1), S = a.k.size(1);
  const dim3 grid(static_cast<unsigned>((L + kRows - 1) / kRows), static_cast<unsigned>(B));
  attention_forward_fused<T, D><<<grid, kRows * 32, 0, detail::current_stream()>>>(
      static_cast<const T*>(a.q.data_ptr()), static_cast<const T*>(a.k.data_ptr()),
      static_cast<const T*>(a.v.data_ptr()), static_cast<T*>(a.out.data_ptr()),
      static_cast<float*>(a.lse.data_ptr()), L, S, static_cast<float>(a.scale), a.causal);
  MT_CUDA_CHECK_LAUNCH();
}

// The first reason the fused kernel cannot take the call, if any.
bool fallback_reason(const AttentionForwardArgs& a, const char*& reason) {
  const int64_t E = a.q.size(2), Ev = a.v.size(2);
  if (a.q.dtype() != kFloat16 && a.q.dtype() != kBFloat16) {
    reason = "Dtype";
  } else if (E != Ev || (E != 64 && E != 128)) {
    reason = "HeadDim";
  } else if (a.mask.defined()) {
    reason = "Mask";
  } else if (a.dropout_p > 0) {
    reason = "Dropout";
  } else if (a.q.size(0) > 65535 || a.q.size(1) > int64_t{INT_MAX}) {
    reason = "Size";
  } else {
    return false;
  }
  return true;
}

bool attention_forward_cuda(const AttentionForwardArgs& a) {
  if (cudnn_attention_forward(a)) return true;  // cuDNN's flash attention first
  const char* reason = nullptr;
  if (fallback_reason(a, reason)) {
    MT_CHECK(!::mantissa::detail::count_fallback("cuda.attention", reason, /*refusal=*/false),
             "scaled_dot_product_attention: the fused CUDA kernel does not take this call (",
             reason, ": q ", a.q.shape(), " ", a.q.dtype(), ", k ", a.k.shape(), ", v ",
             a.v.shape(), a.mask.defined() ? ", attn_mask" : "", a.dropout_p > 0 ? ", dropout" : "",
             ") and the path is strict (set_strict_fast_path(\"cuda.attention\", true))");
    return false;
  }
  DeviceGuard guard(a.q.device().index());
  ::mantissa::detail::count_fast_path("cuda.attention", "fused", a.q.dtype());
  const bool d64 = a.q.size(2) == 64;
  if (a.q.dtype() == kFloat16) {
    d64 ? launch_fused<Half, 64>(a) : launch_fused<Half, 128>(a);
  } else {
    d64 ? launch_fused<BFloat16, 64>(a) : launch_fused<BFloat16, 128>(a);
  }
  return true;
}

// Only fused forwards (cuDNN's or the in-house one) reach here (a composed forward is
// differentiated by its own ops): cuDNN's backward when it takes the call, else the op
// recomputes the weights from lse with composed ops.
bool attention_backward_cuda(const AttentionBackwardArgs& g) {
  if (cudnn_attention_backward(g)) return true;
  ::mantissa::detail::count_fast_path("cuda.attention", "composed_backward");
  return false;
}

}  // namespace

MT_REGISTER_KERNEL(attention_forward_kernel, kCUDA, &attention_forward_cuda);
MT_REGISTER_KERNEL(attention_backward_kernel, kCUDA, &attention_backward_cuda);

}  // namespace mantissa::cuda
