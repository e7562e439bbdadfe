// CPU random kernels: uniform, normal, bernoulli, randint. Element i (row-major over out's
// shape, whatever out's strides) takes philox4x32(seed, offset + i), so a strided output gets
// the same values in the same logical positions as a contiguous one and the thread count never
// changes the result. The sample transforms are shared with CUDA (kernels/random_transforms.h).
#include "engine/kernel_tables.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/philox_batch.h"
#include "kernels/cpu/worker_pool.h"
#include "kernels/random_transforms.h"

namespace mantissa::cpu {
namespace {

// Philox is 10 rounds of multiplies per element (drawn 64 counters at a time,
// kernels/cpu/philox_batch.h, ~1.5 ns each with AVX-512): a second thread pays from a few tens of
// thousands of elements, above the worker pool's wake-up. The pool rather than an OpenMP region:
// libgomp's workers spin-wait after a region and take the cores the next GEMM or attention
// kernel needs (dropout sits between them in every transformer block).
constexpr int64_t kRandomGrain = int64_t(1) << 15;

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
      PhiloxBatch r;
      for (int64_t j0 = 0; j0 < n; j0 += kPhiloxBatch) {
        philox4x32_batch(state.seed, state.offset + static_cast<uint64_t>(i + j0), r);
        const int count = static_cast<int>(std::min<int64_t>(kPhiloxBatch, n - j0));
        for (int l = 0; l < count; ++l)
          *reinterpret_cast<T*>(p + (j0 + l) * s[0]) = sample(r.at(l));
      }
      i += n;
    });
  };
  parallel_ranges(numel, fill_range, numel, kRandomGrain);
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
    const uint64_t bound = philox_bits53_bound(p);
    fill_random<T>(out, state,
                   [=](const Philox4& r) { return random::bernoulli_sample<T>(r, bound); });
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
