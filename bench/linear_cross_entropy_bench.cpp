// The fused lm_head + cross-entropy (linear_cross_entropy) against linear + cross_entropy on the
// CPU (docs/performance.md): forward and backward of the loss from hidden states [N, C] and a
// weight [V, C] to their gradients, in float32 and under bfloat16 autocast. "Peak" is the
// allocator's high-water mark during that above what was allocated before it (the hidden states
// and the weight), so it holds the logits, their intermediates and the two gradients.
//
//   mantissa_linear_ce_bench [N V C reps chunk_rows]
//
// bench/peers/pytorch_linear_cross_entropy.py times PyTorch's unfused linear + cross_entropy on
// the same shapes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "amp/autocast.h"
#include "engine/cpu_allocator.h"
#include "engine/generator.h"
#include "nn/functional.h"

namespace mt = mantissa;
namespace F = mantissa::nn::functional;

namespace {

struct Result {
  double peak_mib = 0;
  double ms = 0;
};

Result measure(const std::function<void()>& step, int reps) {
  Result r{0, 1e300};
  for (int i = 0; i < reps; ++i) {
    const int64_t before = mt::cpu_memory_stats().allocated_bytes;
    mt::reset_cpu_peak_memory_stats();
    const auto t0 = std::chrono::steady_clock::now();
    step();
    const auto t1 = std::chrono::steady_clock::now();
    r.ms = std::min(r.ms, std::chrono::duration<double, std::milli>(t1 - t0).count());
    r.peak_mib = std::max(
        r.peak_mib,
        static_cast<double>(mt::cpu_memory_stats().peak_allocated_bytes - before) / 1048576.0);
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t N = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int64_t V = argc > 2 ? std::atoll(argv[2]) : 50304;
  const int64_t C = argc > 3 ? std::atoll(argv[3]) : 768;
  const int reps = argc > 4 ? std::atoi(argv[4]) : 2;
  const int64_t chunk = argc > 5 ? std::atoll(argv[5]) : 0;
  mt::manual_seed(0);
  const mt::Tensor x = (mt::randn({N, C})).requires_grad_();
  const mt::Tensor w = (mt::randn({V, C}) * 0.02).requires_grad_();
  const mt::Tensor t = mt::randint(0, V, {N}, mt::TensorOptions().dtype(mt::kInt64));
  std::printf(
      "loss of hidden [%lld, %lld] through weight [%lld, %lld], forward + backward; best "
      "of %d (peak: the highest)\n",
      static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(V),
      static_cast<long long>(C), reps);
  std::printf("| precision | path | peak MiB | ms |\n|---|---|---|---|\n");
  for (const bool bf16 : {false, true}) {
    auto with_precision = [&](const std::function<mt::Tensor()>& loss) {
      return [&, loss] {
        x.set_grad(mt::Tensor());
        w.set_grad(mt::Tensor());
        mt::Tensor l;
        {
          mt::amp::autocast guard(mt::kCPU, mt::amp::Precision::BFloat16, bf16);
          l = loss();
        }
        l.backward();
      };
    };
    const auto unfused = with_precision([&] { return F::cross_entropy(F::linear(x, w), t); });
    const auto fused = with_precision([&] {
      return F::linear_cross_entropy(x, w, t, mt::Tensor(), mt::Reduction::Mean, 0.0, -100, chunk);
    });
    Result r[2];
    for (int pass = 0; pass < 2; ++pass) {  // interleaved: unfused, fused, unfused, fused
      const Result u = measure(unfused, (reps + 1) / 2), f = measure(fused, (reps + 1) / 2);
      r[0] = pass == 0 ? u : Result{std::max(r[0].peak_mib, u.peak_mib), std::min(r[0].ms, u.ms)};
      r[1] = pass == 0 ? f : Result{std::max(r[1].peak_mib, f.peak_mib), std::min(r[1].ms, f.ms)};
    }
    const char* p = bf16 ? "bfloat16 autocast" : "float32";
    std::printf("| %s | linear + cross_entropy | %.1f | %.1f |\n", p, r[0].peak_mib, r[0].ms);
    std::printf("| %s | linear_cross_entropy | %.1f | %.1f |\n", p, r[1].peak_mib, r[1].ms);
    std::printf("%s: peak %.1fx less, time %.2fx of unfused\n", p, r[0].peak_mib / r[1].peak_mib,
                r[1].ms / r[0].ms);
  }
  return 0;
}
