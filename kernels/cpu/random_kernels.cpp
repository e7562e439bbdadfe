// CPU random kernels: uniform, normal, bernoulli, randint. Element i (row-major over out's
// shape, whatever out's strides) takes philox4x32(seed, offset + i), so a strided output gets
// the same values in the same logical positions as a contiguous one and the thread count never
// changes the result. The sample transforms are shared with CUDA (kernels/random_transforms.h).
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/random_transforms.h"

namespace mantissa::cpu {
namespace {

// Philox is ~10 rounds of multiplies per element, so threads pay off on smaller tensors than the
// memory-bound elementwise kernels.
constexpr int64_t kRandomGrain = 4096;

// out[i] = sample(philox4x32(seed, offset + i)) for every logical element i.
template <typename T, typename Sample>
void fill_random(const Tensor& out, PhiloxState state, const Sample& sample) {
  const int64_t numel = out.numel();
  if (numel == 0) return;
  const Layout<1> layout(out.shape(), std::array<const Tensor*, 1>{&out});
  auto fill_range = [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    layout.for_each_run(begin, end, [&](char* const* ptrs, const int64_t* s, int64_t n) {
      char* p = ptrs[0];
      for (int64_t j = 0; j < n; ++j, ++i)
        *reinterpret_cast<T*>(p + j * s[0]) = sample(philox4x32(state.seed, state.offset + i));
    });
  };
#if defined(_OPENMP)
  if (numel >= kRandomGrain && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), tid = omp_get_thread_num();
      const int64_t chunk = (numel + threads - 1) / threads;
      const int64_t b = tid * chunk, e = std::min(numel, b + chunk);
      if (b < e) fill_range(b, e);
    }
    return;
  }
#endif
  fill_range(0, numel);
}

void uniform_kernel_cpu(const Tensor& out, double low, double high, PhiloxState state) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), "uniform_", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T below_high = random::largest_below<T>(high);
    fill_random<T>(out, state, [=](const Philox4& r) {
      return random::uniform_sample<T>(r, low, high, below_high);
    });
  });
}

void normal_kernel_cpu(const Tensor& out, double mean, double stddev, PhiloxState state) {
  dispatch_dtype<kFloatingTypes>(out.dtype(), "normal_", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_random<T>(out, state,
                   [=](const Philox4& r) { return random::normal_sample<T>(r, mean, stddev); });
  });
}

void bernoulli_kernel_cpu(const Tensor& out, double p, PhiloxState state) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "bernoulli_", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_random<T>(out, state, [=](const Philox4& r) { return random::bernoulli_sample<T>(r, p); });
  });
}

void randint_kernel_cpu(const Tensor& out, int64_t low, int64_t high, PhiloxState state) {
  dispatch_dtype<kAllTypesAndBool>(out.dtype(), "randint", out.device(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
    fill_random<T>(out, state,
                   [=](const Philox4& r) { return random::randint_sample<T>(r, low, range); });
  });
}

}  // namespace

MT_REGISTER_KERNEL(uniform_kernel, kCPU, &uniform_kernel_cpu);
MT_REGISTER_KERNEL(normal_kernel, kCPU, &normal_kernel_cpu);
MT_REGISTER_KERNEL(bernoulli_kernel, kCPU, &bernoulli_kernel_cpu);
MT_REGISTER_KERNEL(randint_kernel, kCPU, &randint_kernel_cpu);

}  // namespace mantissa::cpu
