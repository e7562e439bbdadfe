// CUDA random kernels: uniform, normal, bernoulli, randint. Element i (row-major over out's
// shape, whatever its strides) draws philox4x32(seed, offset + i) and maps it with the transforms
// the CPU kernels use (kernels/random_transforms.h), so a (seed, offset) gives the same tensor on
// either device. Those transforms compute `a + b * u` in double; this file is compiled with
// --fmad=false (CMakeLists.txt) so that nvcc does not fuse it into an FMA, which would round
// differently from the CPU. uniform, bernoulli and randint match the CPU bit for bit; normal
// goes through log/cos, whose CUDA and libm implementations may differ in the last bit.
#include "engine/kernel_tables.h"
#include "engine/philox.h"
#include "kernels/cuda/loops.cuh"
#include "kernels/random_transforms.h"

namespace mantissa::cuda {
namespace {

template <typename T>
struct UniformFn {
  PhiloxState state;
  double low, high;
  T below_high;
  __device__ T operator()(int64_t i) const {
    return random::uniform_sample<T>(philox4x32(state.seed, state.offset + i), low, high,
                                     below_high);
  }
};

template <typename T>
struct NormalFn {
  PhiloxState state;
  double mean, stddev;
  __device__ T operator()(int64_t i) const {
    return random::normal_sample<T>(philox4x32(state.seed, state.offset + i), mean, stddev);
  }
};

template <typename T>
struct BernoulliFn {
  PhiloxState state;
  uint64_t bound;  // philox_bits53_bound(p)
  __device__ T operator()(int64_t i) const {
    return random::bernoulli_sample<T>(philox4x32(state.seed, state.offset + i), bound);
  }
};

template <typename T>
struct RandintFn {
  PhiloxState state;
  int64_t low;
  uint64_t range;
  __device__ T operator()(int64_t i) const {
    return random::randint_sample<T>(philox4x32(state.seed, state.offset + i), low, range);
  }
};

void uniform_kernel_cuda(const Tensor& out, double low, double high, PhiloxState state) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), "uniform_", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_generate<T>(out, UniformFn<T>{state, low, high, random::largest_below<T>(high)});
  });
}

void normal_kernel_cuda(const Tensor& out, double mean, double stddev, PhiloxState state) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), "normal_", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_generate<T>(out, NormalFn<T>{state, mean, stddev});
  });
}

void bernoulli_kernel_cuda(const Tensor& out, double p, PhiloxState state) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "bernoulli_", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gpu_generate<T>(out, BernoulliFn<T>{state, philox_bits53_bound(p)});
  });
}

void randint_kernel_cuda(const Tensor& out, int64_t low, int64_t high, PhiloxState state) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "randint", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
    gpu_generate<T>(out, RandintFn<T>{state, low, range});
  });
}

}  // namespace

MT_REGISTER_KERNEL(uniform_kernel, kCUDA, &uniform_kernel_cuda);
MT_REGISTER_KERNEL(normal_kernel, kCUDA, &normal_kernel_cuda);
MT_REGISTER_KERNEL(bernoulli_kernel, kCUDA, &bernoulli_kernel_cuda);
MT_REGISTER_KERNEL(randint_kernel, kCUDA, &randint_kernel_cuda);

}  // namespace mantissa::cuda
