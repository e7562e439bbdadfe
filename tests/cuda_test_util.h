// Helpers of the CUDA tests: HeldStream keeps a stream busy for as long as a test needs, so that
// "not reused while in use" is tested deterministically instead of racing the GPU; and the skip
// for tests of caching behaviour when MANTISSA_CUDA_ALLOCATOR_BYPASS=1 turns the cache off (the
// sanitizer runs do that).
#pragma once

#include <atomic>
#include <memory>

#include "cuda/memory.h"
#include "cuda/stream.h"
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

}  // namespace mantissa::testing

// For tests of what the caching allocator reuses: skipped when the cache is bypassed.
#define MT_REQUIRE_CUDA_CACHING()                               \
  do {                                                          \
    if (::mantissa::testing::cuda_cache_bypassed())             \
      GTEST_SKIP() << "the CUDA caching allocator is bypassed " \
                   << "(MANTISSA_CUDA_ALLOCATOR_BYPASS=1)";     \
  } while (0)
