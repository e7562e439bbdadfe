// Helpers of the CUDA tests: HeldStream keeps a stream busy for as long as a test needs, so that
// "not reused while in use" is tested deterministically instead of racing the GPU; the skip for
// tests of caching behaviour when MANTISSA_CUDA_ALLOCATOR_BYPASS=1 turns the cache off (the
// sanitizer runs do that); and the report of a vendor library's refusals.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "cuda/memory.h"
#include "cuda/stream.h"
#include "engine/fast_path_stats.h"
#include "test_util.h"

namespace mantissa::testing {

// What a host function queued on a stream waits for: until `release` is set, work queued behind
// it cannot run. It gives up after timeout_ms and sets timed_out.
struct StreamGate {
  std::atomic<bool> release{false};
  std::atomic<bool> timed_out{false};
  int timeout_ms = 20000;
};
// Queues the gate's host function on `stream` (cuda_stream_gate.cpp; throws without CUDA).
void hold_stream(const cuda::Stream& stream, StreamGate* gate);

// Holds `stream`: a host function queued on it (hold_stream) waits
// until release() or the destructor, so nothing queued on the stream after the hold can run.
// It gives up after `timeout_ms` and timed_out() then says so: a test that waits for the held
// stream by mistake fails instead of hanging; so would anything that waits for the whole device
// while the hold lasts, such as cudaFree (every free, when the cache is bypassed). The destructor
// releases the hold and waits for the stream to pass it: the host function reads the gate.
class HeldStream {
 public:
  explicit HeldStream(const cuda::Stream& stream, int timeout_ms = 20000)
      : stream_(stream), gate_(std::make_unique<StreamGate>()) {
    gate_->timeout_ms = timeout_ms;
    hold_stream(stream, gate_.get());
  }
  ~HeldStream() {
    release();
    try {
      stream_.synchronize();
    } catch (...) {
      (void)gate_.release();  // leaked: the host function may still read it
    }
  }
  HeldStream(const HeldStream&) = delete;
  HeldStream& operator=(const HeldStream&) = delete;

  void release() { gate_->release = true; }
  bool timed_out() const { return gate_->timed_out.load(); }

 private:
  cuda::Stream stream_;
  std::unique_ptr<StreamGate> gate_;
};

// True when MANTISSA_CUDA_ALLOCATOR_BYPASS=1: every tensor has its own cudaMalloc, and nothing
// is reused.
inline bool cuda_cache_bypassed() { return cuda::memory_stats(0).cache_bypassed; }

// A vendor library (cuBLASLt, cuDNN) may decline a fast path for a case that its documentation
// allows: that is news about the library version on the machine, not a mantissa bug, and the
// composed path then runs. A test that checked its results against the CPU calls this: it prints
// each refusal of `path` since the stats were reset, with the library's own message, as
// "[ LIBRARY  ] ..." (scripts/gpu/run.sh lists these lines apart from the verdict), and returns
// how many calls were refused; the test then skips only its checks of the fast path's route.
inline int64_t report_library_refusals(std::string_view path) {
  int64_t refused = 0;
  const FastPathStats stats = fast_path_stats();
  for (const FastPathRow& r : stats.rows()) {
    if (r.path != path || r.outcome != PathOutcome::Refused) continue;
    refused += r.count;
    const std::string_view dtype = r.dtype ? dtype_name(*r.dtype) : std::string_view();
    std::printf("[ LIBRARY  ] %s declined %s%s%.*s (%lld calls): %s\n", r.path.c_str(),
                r.what.c_str(), dtype.empty() ? "" : " ", static_cast<int>(dtype.size()),
                dtype.data(), static_cast<long long>(r.count),
                r.message.empty() ? "(no message)" : r.message.c_str());
  }
  return refused;
}

}  // namespace mantissa::testing

// For tests of what the caching allocator reuses: skipped when the cache is bypassed.
#define MT_REQUIRE_CUDA_CACHING()                               \
  do {                                                          \
    if (::mantissa::testing::cuda_cache_bypassed())             \
      GTEST_SKIP() << "the CUDA caching allocator is bypassed " \
                   << "(MANTISSA_CUDA_ALLOCATOR_BYPASS=1)";     \
  } while (0)
