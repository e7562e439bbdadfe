#include "engine/cuda_conv_stats.h"

#include <atomic>

#include "engine/cuda_linear_stats.h"

namespace mantissa::cuda {
namespace {

// Relaxed: the counters order nothing; they are read after the host-side call that counted.
struct Counters {
  std::atomic<int64_t> cudnn[kNumConvDirections] = {};
  std::atomic<int64_t> composed[kNumConvDirections] = {};
};

Counters& counters() {
  static Counters c;
  return c;
}

}  // namespace

ConvStats conv_stats() {
  const Counters& c = counters();
  ConvStats s;
  for (int d = 0; d < kNumConvDirections; ++d) {
    s.cudnn[d] = c.cudnn[d].load(std::memory_order_relaxed);
    s.composed[d] = c.composed[d].load(std::memory_order_relaxed);
  }
  return s;
}

void reset_conv_stats() {
  Counters& c = counters();
  for (int d = 0; d < kNumConvDirections; ++d) {
    c.cudnn[d].store(0, std::memory_order_relaxed);
    c.composed[d].store(0, std::memory_order_relaxed);
  }
}

namespace detail {

void count_conv_cudnn(ConvDirection d) {
  counters().cudnn[static_cast<int>(d)].fetch_add(1, std::memory_order_relaxed);
}

bool count_conv_composed(ConvDirection d) {
  counters().composed[static_cast<int>(d)].fetch_add(1, std::memory_order_relaxed);
  return strict_fast_paths();
}

}  // namespace detail
}  // namespace mantissa::cuda
