// Block-wide reductions of the row kernels that give a whole block to one row (softmax, the
// cross-entropy rows): every thread contributes a value and every thread gets the combined one.
#pragma once

namespace mantissa::cuda {

// max skipping NaN, like std::max(m, v) on the CPU (exp(NaN - m) poisons the sum later anyway).
template <typename M>
__device__ __forceinline__ M max_skip_nan(M m, M v) {
  return m < v ? v : m;
}

// Combines every thread's v with f and returns the result to all threads of the block. smem holds
// blockDim.x values; blockDim.x is a power of two.
template <typename M, typename F>
__device__ M block_allreduce(M v, M* smem, const F& f) {
  const int tid = threadIdx.x;
  smem[tid] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) smem[tid] = f(smem[tid], smem[tid + s]);
    __syncthreads();
  }
  const M r = smem[0];
  __syncthreads();  // everyone has read smem[0] before the next call overwrites it
  return r;
}

struct MaxOf {
  template <typename M>
  __device__ M operator()(M a, M b) const {
    return max_skip_nan(a, b);
  }
};
struct SumOf {
  template <typename M>
  __device__ M operator()(M a, M b) const {
    return a + b;
  }
};

}  // namespace mantissa::cuda
