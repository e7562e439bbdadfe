#include "engine/cuda_linear_stats.h"

#include <atomic>

#include "engine/environment.h"

namespace mantissa::cuda {
namespace {

// Relaxed: the counters order nothing, they are read after the work they count (tests
// synchronize or read after the host-side call returned, which is when the count is made).
struct Counters {
  std::atomic<int64_t> epilogues[kNumLinearEpilogues][LinearStats::kNumDtypes] = {};
  std::atomic<int64_t> relu_forward[LinearStats::kNumDtypes] = {};
  std::atomic<int64_t> relu_backward[LinearStats::kNumDtypes] = {};
  std::atomic<int64_t> fallbacks[kNumLinearFallbacks] = {};
};

Counters& counters() {
  static Counters c;
  return c;
}

std::atomic<bool>& strict_flag() {
  static std::atomic<bool> flag{
      mantissa::detail::env_word("MANTISSA_STRICT_FAST_PATHS", {"0", "1"}) == 1};
  return flag;
}

void bump(std::atomic<int64_t>& counter) { counter.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

const char* linear_epilogue_name(LinearEpilogue epilogue) {
  switch (epilogue) {
    case LinearEpilogue::Default:
      return "DEFAULT";
    case LinearEpilogue::Bias:
      return "BIAS";
    case LinearEpilogue::Gelu:
      return "GELU";
    case LinearEpilogue::GeluBias:
      return "GELU_BIAS";
    case LinearEpilogue::GeluAux:
      return "GELU_AUX";
    case LinearEpilogue::GeluAuxBias:
      return "GELU_AUX_BIAS";
    case LinearEpilogue::BGradB:
      return "BGRADB";
    case LinearEpilogue::DGelu:
      return "DGELU";
    case LinearEpilogue::DGeluBGrad:
      return "DGELU_BGRAD";
  }
  return "?";
}

const char* linear_fallback_name(LinearFallback reason) {
  switch (reason) {
    case LinearFallback::UnsupportedDtype:
      return "UnsupportedDtype";
    case LinearFallback::NonUnitStride:
      return "NonUnitStride";
    case LinearFallback::NonPackedBias:
      return "NonPackedBias";
    case LinearFallback::AuxLayout:
      return "AuxLayout";
    case LinearFallback::Empty:
      return "Empty";
    case LinearFallback::NoAlgorithm:
      return "NoAlgorithm";
  }
  return "?";
}

LinearStats linear_stats() {
  const Counters& c = counters();
  LinearStats s;
  for (int d = 0; d < LinearStats::kNumDtypes; ++d) {
    for (int e = 0; e < kNumLinearEpilogues; ++e)
      s.epilogues[e][d] = c.epilogues[e][d].load(std::memory_order_relaxed);
    s.relu_forward[d] = c.relu_forward[d].load(std::memory_order_relaxed);
    s.relu_backward[d] = c.relu_backward[d].load(std::memory_order_relaxed);
  }
  for (int r = 0; r < kNumLinearFallbacks; ++r)
    s.fallbacks[r] = c.fallbacks[r].load(std::memory_order_relaxed);
  return s;
}

void reset_linear_stats() {
  Counters& c = counters();
  for (int d = 0; d < LinearStats::kNumDtypes; ++d) {
    for (int e = 0; e < kNumLinearEpilogues; ++e)
      c.epilogues[e][d].store(0, std::memory_order_relaxed);
    c.relu_forward[d].store(0, std::memory_order_relaxed);
    c.relu_backward[d].store(0, std::memory_order_relaxed);
  }
  for (int r = 0; r < kNumLinearFallbacks; ++r) c.fallbacks[r].store(0, std::memory_order_relaxed);
}

bool strict_fast_paths() { return strict_flag().load(std::memory_order_relaxed); }
void set_strict_fast_paths(bool strict) { strict_flag().store(strict, std::memory_order_relaxed); }

namespace detail {

void count_linear_epilogue(LinearEpilogue epilogue, DType dtype) {
  const int d = LinearStats::dtype_index(dtype);
  if (d >= 0) bump(counters().epilogues[static_cast<int>(epilogue)][d]);
}

void count_linear_relu(bool backward, DType dtype) {
  const int d = LinearStats::dtype_index(dtype);
  if (d >= 0) bump(backward ? counters().relu_backward[d] : counters().relu_forward[d]);
}

bool count_linear_fallback(LinearFallback reason) {
  bump(counters().fallbacks[static_cast<int>(reason)]);
  return is_refusal(reason) && strict_fast_paths();
}

}  // namespace detail
}  // namespace mantissa::cuda
