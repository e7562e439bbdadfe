// The CUDA caching allocator's block bookkeeping (cuda/block_allocator.h), run on the CPU with a
// fake raw allocator that hands out host memory and counts calls, and fake events that the test
// completes by hand; also the bypass mode (MANTISSA_CUDA_ALLOCATOR_BYPASS) and what a capture may
// not do (query events). Runs in every build.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "cuda/block_allocator.h"
#include "engine/error.h"
#include "test_util.h"

namespace mantissa::testing {
namespace {

using detail::BlockAllocator;
using detail::CacheMode;
using detail::EventHandle;
using detail::kSmallSegment;
using detail::StreamId;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

class FakeRaw final : public detail::RawMemory {
 public:
  void* alloc(size_t nbytes) override {
    ++allocs;
    if (fail_next > 0) {
      --fail_next;
      return nullptr;
    }
    if (limit != 0 && in_use + nbytes > limit) return nullptr;
    // Only the addresses matter; memory is never touched, but it must be real to be unique.
    void* p = std::malloc(nbytes);
    in_use += nbytes;
    sizes.push_back({p, nbytes});
    return p;
  }
  void free(void* ptr) override {
    ++frees;
    for (auto it = sizes.begin(); it != sizes.end(); ++it) {
      if (it->first == ptr) {
        in_use -= it->second;
        sizes.erase(it);
        std::free(ptr);
        return;
      }
    }
    ADD_FAILURE() << "raw free of a pointer the fake never handed out";
  }
  EventHandle record_event(StreamId stream) override {
    auto* e = new Event{stream, false};
    events.insert(e);
    return e;
  }
  bool event_done(EventHandle e) override {
    ++queries;
    return static_cast<Event*>(e)->done;
  }
  void destroy_event(EventHandle e) override {
    events.erase(static_cast<Event*>(e));
    delete static_cast<Event*>(e);
  }
  std::string device_memory_info() override { return "7.00 MiB free of 64.00 MiB"; }

  // Completes every event recorded on `stream`.
  void finish_stream(StreamId stream) {
    for (Event* e : events)
      if (e->stream == stream) e->done = true;
  }

  struct Event {
    StreamId stream;
    bool done;
  };
  int allocs = 0, frees = 0, fail_next = 0, queries = 0;
  size_t limit = 0, in_use = 0;
  std::vector<std::pair<void*, size_t>> sizes;
  std::set<Event*> events;
};

struct CachingAllocatorBlocks : ::testing::Test {
  FakeRaw raw;
  BlockAllocator alloc{"cuda:0", &raw};
  static constexpr StreamId kS0 = 0, kS1 = 0x1000, kS2 = 0x2000;
};

TEST_F(CachingAllocatorBlocks, SteadyStateReusesBlocksWithoutRawAllocations) {
  // A training-step-like pattern: the same sizes allocated and freed every iteration.
  const std::vector<size_t> sizes{100, 4 * kKiB, 300 * kKiB, 3 * kMiB, 17 * kMiB};
  auto step = [&] {
    std::vector<void*> ptrs;
    for (size_t s : sizes) ptrs.push_back(alloc.allocate(s, kS0));
    for (void* p : ptrs) alloc.free(p);
  };
  step();
  const int raw_after_first = raw.allocs;
  EXPECT_GT(raw_after_first, 0);
  for (int i = 0; i < 20; ++i) step();
  EXPECT_EQ(raw.allocs, raw_after_first);
  EXPECT_EQ(raw.frees, 0);
  const auto s = alloc.stats();
  EXPECT_EQ(s.num_allocations, 21 * static_cast<int64_t>(sizes.size()));
  EXPECT_EQ(s.num_cache_hits, s.num_allocations - s.num_cuda_mallocs);
  EXPECT_EQ(s.num_cuda_mallocs, raw_after_first);
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.cached_bytes, s.reserved_bytes);
}

TEST_F(CachingAllocatorBlocks, SmallRequestsShareOneSegmentAndRoundTo512) {
  void* a = alloc.allocate(1, kS0);
  void* b = alloc.allocate(513, kS0);
  void* c = alloc.allocate(kMiB, kS0);  // still small
  EXPECT_EQ(alloc.block_size_of(a), 512u);
  EXPECT_EQ(alloc.block_size_of(b), 1024u);
  EXPECT_EQ(alloc.block_size_of(c), kMiB);
  EXPECT_EQ(raw.allocs, 1);  // all three carved from one 2 MiB segment
  const auto s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(kSmallSegment));
  EXPECT_EQ(s.allocated_bytes, static_cast<int64_t>(512 + 1024 + kMiB));
  EXPECT_EQ(s.requested_bytes, static_cast<int64_t>(1 + 513 + kMiB));
  // Consecutive blocks of one segment are adjacent.
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 512);
  alloc.free(a);
  alloc.free(b);
  alloc.free(c);
}

TEST_F(CachingAllocatorBlocks, LargeRequestsGetSegmentsRoundedTo2MiB) {
  void* p = alloc.allocate(kMiB + 1, kS0);
  EXPECT_EQ(raw.sizes.back().second, 2 * kMiB);
  void* q = alloc.allocate(5 * kMiB, kS0);
  EXPECT_EQ(raw.sizes.back().second, 6 * kMiB);
  EXPECT_EQ(alloc.stats().reserved_bytes, static_cast<int64_t>(8 * kMiB));
  alloc.free(p);
  alloc.free(q);
}

TEST_F(CachingAllocatorBlocks, SplitsLargeBlocksAndMergesNeighboursOnFree) {
  void* big = alloc.allocate(20 * kMiB, kS0);
  alloc.free(big);
  EXPECT_EQ(raw.allocs, 1);
  // Three 4 MiB requests are cut from the cached 20 MiB segment, in address order.
  void* a = alloc.allocate(4 * kMiB, kS0);
  void* b = alloc.allocate(4 * kMiB, kS0);
  void* c = alloc.allocate(4 * kMiB, kS0);
  EXPECT_EQ(raw.allocs, 1);
  EXPECT_EQ(a, big);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), static_cast<ptrdiff_t>(4 * kMiB));
  EXPECT_EQ(static_cast<char*>(c) - static_cast<char*>(b), static_cast<ptrdiff_t>(4 * kMiB));
  EXPECT_GE(alloc.stats().num_splits, 3);
  // Freeing the middle block leaves a 4 MiB hole between live blocks; a 6 MiB request does not
  // fit there and goes to the 8 MiB tail instead.
  alloc.free(b);
  void* d = alloc.allocate(6 * kMiB, kS0);
  EXPECT_EQ(static_cast<char*>(d) - static_cast<char*>(c), static_cast<ptrdiff_t>(4 * kMiB));
  alloc.free(d);
  // a, (b), c freed: everything merges back into one 20 MiB block.
  alloc.free(a);
  alloc.free(c);
  EXPECT_GE(alloc.stats().num_merges, 3);
  void* whole = alloc.allocate(20 * kMiB, kS0);
  EXPECT_EQ(whole, big);
  EXPECT_EQ(raw.allocs, 1);
  alloc.free(whole);
}

TEST_F(CachingAllocatorBlocks, SmallRequestsDoNotFragmentLargeSegments) {
  void* big = alloc.allocate(4 * kMiB, kS0);
  alloc.free(big);
  void* small = alloc.allocate(4 * kKiB, kS0);
  EXPECT_EQ(raw.allocs, 2);  // a small segment, not a piece of the cached large block
  alloc.free(small);
}

TEST_F(CachingAllocatorBlocks, BlocksFreedOnOneStreamAreNotReusedOnAnother) {
  void* a = alloc.allocate(64 * kKiB, kS1);
  alloc.free(a);
  void* b = alloc.allocate(64 * kKiB, kS2);
  EXPECT_NE(a, b);
  EXPECT_EQ(raw.allocs, 2);  // stream 2 got its own segment
  void* c = alloc.allocate(64 * kKiB, kS1);
  EXPECT_EQ(c, a);  // stream 1 reuses its own block
  EXPECT_EQ(raw.allocs, 2);
  alloc.free(b);
  alloc.free(c);
}

TEST_F(CachingAllocatorBlocks, RecordStreamDelaysReuseUntilTheOtherStreamIsDone) {
  void* a = alloc.allocate(64 * kKiB, kS1);
  alloc.record_stream(static_cast<char*>(a) + 100, kS2);  // a view inside the block counts
  alloc.free(a);
  // Stream 2 may still be reading: the block is not handed out again yet.
  void* b = alloc.allocate(64 * kKiB, kS1);
  EXPECT_NE(b, a);
  raw.finish_stream(kS2);
  void* c = alloc.allocate(64 * kKiB, kS1);
  EXPECT_EQ(c, a);
  EXPECT_TRUE(raw.events.empty());  // the event was destroyed once it completed
  alloc.free(b);
  alloc.free(c);
  expect_error([&] { alloc.record_stream(c, kS2); }, {"record_stream", "not memory of a live"});
}

TEST_F(CachingAllocatorBlocks, PeakAndCurrentStats) {
  void* a = alloc.allocate(4 * kMiB, kS0);
  void* b = alloc.allocate(6 * kMiB, kS0);
  alloc.free(a);
  auto s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, static_cast<int64_t>(6 * kMiB));
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(s.peak_reserved_bytes, static_cast<int64_t>(10 * kMiB));
  EXPECT_EQ(s.cached_bytes, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(s.num_segments, 2);
  alloc.reset_peaks();
  s = alloc.stats();
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(6 * kMiB));
  alloc.free(b);
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, static_cast<int64_t>(6 * kMiB));
}

TEST_F(CachingAllocatorBlocks, AllocatedCountsTheWholeBlockWhenTheRestIsTooSmallToSplit) {
  // 3 MiB from a 4 MiB segment: a 1 MiB rest is too small for a large request, so it stays
  // with the block (and counts as allocated), as in PyTorch.
  void* a = alloc.allocate(3 * kMiB, kS0);
  EXPECT_EQ(alloc.block_size_of(a), 4 * kMiB);
  EXPECT_EQ(alloc.stats().allocated_bytes, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(alloc.stats().requested_bytes, static_cast<int64_t>(3 * kMiB));
  alloc.free(a);
}

TEST_F(CachingAllocatorBlocks, EmptyCacheReturnsOnlyWholeUnusedSegments) {
  void* a = alloc.allocate(kKiB, kS0);  // small segment, stays partly used
  void* b = alloc.allocate(2 * kKiB, kS0);
  void* big = alloc.allocate(8 * kMiB, kS0);  // large segment, freed entirely
  alloc.free(b);
  alloc.free(big);
  alloc.empty_cache();
  EXPECT_EQ(raw.frees, 1);
  auto s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(kSmallSegment));
  EXPECT_EQ(s.num_cuda_frees, 1);
  alloc.free(a);
  alloc.empty_cache();
  s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(s.num_segments, 0);
  EXPECT_EQ(raw.in_use, 0u);
}

TEST_F(CachingAllocatorBlocks, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  raw.limit = 10 * kMiB;
  void* a = alloc.allocate(8 * kMiB, kS1);
  alloc.free(a);  // cached on stream 1, useless to stream 2
  void* b = alloc.allocate(8 * kMiB, kS2);
  ASSERT_NE(b, nullptr);
  auto s = alloc.stats();
  EXPECT_EQ(s.num_oom_retries, 1);
  EXPECT_EQ(s.num_cuda_frees, 1);
  EXPECT_EQ(s.reserved_bytes, static_cast<int64_t>(8 * kMiB));
  // Nothing left to release: the second failure is reported with the numbers.
  expect_error([&] { alloc.allocate(4 * kMiB, kS2); },
               {"CUDA out of memory on cuda:0", "tried to allocate 4.00 MiB", "4194304 bytes",
                "8.00 MiB allocated", "8.00 MiB reserved", "retried",
                "the device has 7.00 MiB free of 64.00 MiB"});
  EXPECT_EQ(alloc.stats().num_oom_retries, 2);
  alloc.free(b);
}

TEST_F(CachingAllocatorBlocks, TransientRawFailureIsRetried) {
  raw.fail_next = 1;
  void* a = alloc.allocate(kKiB, kS0);
  EXPECT_NE(a, nullptr);
  EXPECT_EQ(alloc.stats().num_oom_retries, 1);
  alloc.free(a);
}

TEST_F(CachingAllocatorBlocks, GraphPoolIsPrivateAndReleasedWithItsGraph) {
  const StreamId capture = kS1;
  const auto pool = alloc.create_pool();
  // Warm-up outside the capture fills the private pool ...
  alloc.begin_pool_use(capture, pool);
  void* w = alloc.allocate(3 * kMiB, capture);
  alloc.free(w);
  EXPECT_EQ(alloc.stats().graph_pool_bytes, static_cast<int64_t>(4 * kMiB));
  // ... so the capture itself needs no raw allocation.
  alloc.begin_capture();
  void* c = alloc.allocate(3 * kMiB, capture);
  EXPECT_EQ(c, w);
  alloc.free(c);        // freed during capture: stays in the pool
  alloc.empty_cache();  // ignored during a capture
  EXPECT_EQ(raw.frees, 0);
  alloc.end_capture();
  alloc.end_pool_use(capture);
  EXPECT_EQ(alloc.stats().num_capture_mallocs, 0);
  // The general pool on the same stream never sees the graph's memory ...
  void* g = alloc.allocate(3 * kMiB, capture);
  EXPECT_NE(g, w);
  alloc.free(g);
  // ... nor does empty_cache take it while the graph lives.
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().graph_pool_bytes, static_cast<int64_t>(4 * kMiB));
  alloc.release_pool(pool);
  EXPECT_EQ(alloc.stats().graph_pool_bytes, 0);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
  expect_error([&] { alloc.begin_pool_use(capture, pool); }, {"pool", "released"});
}

TEST_F(CachingAllocatorBlocks, GraphPoolBlocksStillLiveAreReleasedWhenFreed) {
  const auto pool = alloc.create_pool();
  alloc.begin_pool_use(kS1, pool);
  alloc.begin_capture();
  void* out = alloc.allocate(kKiB, kS1);  // e.g. a graph's static output held by the user
  alloc.end_capture();
  alloc.end_pool_use(kS1);
  EXPECT_EQ(alloc.stats().num_capture_mallocs, 1);
  alloc.release_pool(pool);
  EXPECT_EQ(raw.frees, 0);  // still in use
  alloc.free(out);
  EXPECT_EQ(raw.frees, 1);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
}

TEST_F(CachingAllocatorBlocks, NoRetryDuringCapture) {
  raw.limit = 4 * kMiB;
  void* a = alloc.allocate(4 * kMiB, kS0);
  alloc.free(a);
  alloc.begin_capture();
  expect_error([&] { alloc.allocate(4 * kMiB, kS1); }, {"out of memory", "capture is underway"});
  EXPECT_EQ(raw.frees, 0);
  alloc.end_capture();
}

TEST_F(CachingAllocatorBlocks, CaptureQueriesNoEventAndKeepsWaitingBlocksOut) {
  // A block freed while stream 2 may still read it waits for an event there.
  void* a = alloc.allocate(64 * kKiB, kS1);
  alloc.record_stream(a, kS2);
  alloc.free(a);
  raw.finish_stream(kS2);  // done on the device, but nobody has looked yet
  alloc.begin_capture();
  const int queries = raw.queries;
  // Querying the event during a capture would invalidate it: the block stays out.
  void* b = alloc.allocate(64 * kKiB, kS1);
  EXPECT_NE(b, a);
  alloc.free(b);
  void* c = alloc.allocate(kMiB, kS1);
  EXPECT_NE(c, a);
  alloc.empty_cache();  // ignored during a capture, events included
  EXPECT_EQ(raw.queries, queries);
  alloc.end_capture();
  // After the capture the event is looked at, and the block is back.
  void* d = alloc.allocate(64 * kKiB, kS1);
  EXPECT_GT(raw.queries, queries);
  EXPECT_EQ(d, a);
  EXPECT_TRUE(raw.events.empty());
  alloc.free(c);
  alloc.free(d);
}

TEST_F(CachingAllocatorBlocks, BlockFreedDuringCaptureWaitsForItsEventsAfterwards) {
  void* a = alloc.allocate(64 * kKiB, kS1);
  alloc.record_stream(a, kS2);
  alloc.begin_capture();
  alloc.free(a);
  EXPECT_TRUE(raw.events.empty());  // an event recorded now would join the capture
  void* b = alloc.allocate(64 * kKiB, kS1);
  EXPECT_NE(b, a);
  alloc.end_capture();
  EXPECT_EQ(raw.events.size(), 1u);  // recorded at the end of the capture, not yet done
  void* c = alloc.allocate(64 * kKiB, kS1);
  EXPECT_NE(c, a);
  raw.finish_stream(kS2);
  void* d = alloc.allocate(64 * kKiB, kS1);
  EXPECT_EQ(d, a);
  alloc.free(b);
  alloc.free(c);
  alloc.free(d);
}

TEST_F(CachingAllocatorBlocks, UnknownFreeIsIgnoredAndZeroBytesIsNull) {
  EXPECT_EQ(alloc.allocate(0, kS0), nullptr);
  int x = 0;
  alloc.free(&x);  // logged, not thrown
  alloc.free(nullptr);
  EXPECT_EQ(alloc.stats().num_allocations, 0);
}

// ---- MANTISSA_CUDA_ALLOCATOR_BYPASS ----------------------------------------------------------
struct BypassedAllocator : ::testing::Test {
  FakeRaw raw;
  BlockAllocator alloc{"cuda:0", &raw, CacheMode::Bypass};
  static constexpr StreamId kS0 = 0, kS1 = 0x1000, kS2 = 0x2000;
};

TEST_F(BypassedAllocator, EveryTensorIsItsOwnRawAllocationOfItsExactSize) {
  void* a = alloc.allocate(100, kS0);
  EXPECT_EQ(raw.sizes.back().second, 100u);  // no rounding: a checker sees a 101st byte
  void* b = alloc.allocate(5 * kMiB + 3, kS0);
  EXPECT_EQ(raw.sizes.back().second, 5 * kMiB + 3);
  EXPECT_EQ(alloc.block_size_of(b), 5 * kMiB + 3);
  alloc.free(a);
  EXPECT_EQ(raw.frees, 1);  // straight back to the device
  void* c = alloc.allocate(100, kS0);
  EXPECT_EQ(raw.allocs, 3);  // nothing cached
  alloc.free(b);
  alloc.free(c);
  const auto s = alloc.stats();
  EXPECT_TRUE(s.cache_bypassed);
  EXPECT_EQ(s.num_allocations, 3);
  EXPECT_EQ(s.num_cuda_mallocs, 3);
  EXPECT_EQ(s.num_cuda_frees, 3);
  EXPECT_EQ(s.num_cache_hits, 0);
  EXPECT_EQ(s.num_splits, 0);
  EXPECT_EQ(s.peak_allocated_bytes, static_cast<int64_t>(100 + 5 * kMiB + 3));
  EXPECT_EQ(s.reserved_bytes, 0);
  EXPECT_EQ(raw.in_use, 0u);
  FakeRaw other_raw;
  EXPECT_FALSE(BlockAllocator("cuda:0", &other_raw).stats().cache_bypassed);
}

TEST_F(BypassedAllocator, RecordStreamStillDelaysTheFree) {
  void* a = alloc.allocate(kKiB, kS1);
  alloc.record_stream(a, kS2);
  alloc.free(a);
  void* b = alloc.allocate(kKiB, kS1);
  EXPECT_EQ(raw.frees, 0);  // stream 2 may still read a
  raw.finish_stream(kS2);
  alloc.empty_cache();
  EXPECT_EQ(raw.frees, 1);
  alloc.free(b);
  EXPECT_EQ(raw.in_use, 0u);
}

TEST_F(BypassedAllocator, NothingIsFreedDuringACaptureAndGraphPoolsKeepTheirMemory) {
  void* before = alloc.allocate(kKiB, kS0);  // a general-pool block freed during the capture
  const auto pool = alloc.create_pool();
  alloc.begin_pool_use(kS1, pool);
  alloc.begin_capture();
  void* tmp = alloc.allocate(kKiB, kS1);
  void* out = alloc.allocate(kKiB, kS1);
  alloc.free(tmp);
  alloc.free(before);
  EXPECT_EQ(raw.frees, 0);
  alloc.end_capture();
  alloc.end_pool_use(kS1);
  EXPECT_EQ(raw.frees, 1);  // `before`, now that the capture is over
  // The graph's addresses stay reserved while it lives, even freed ones.
  alloc.free(out);
  alloc.empty_cache();
  EXPECT_EQ(raw.frees, 1);
  EXPECT_EQ(alloc.stats().graph_pool_bytes, static_cast<int64_t>(2 * kKiB));
  alloc.release_pool(pool);
  EXPECT_EQ(raw.frees, 3);
  EXPECT_EQ(raw.in_use, 0u);
}

TEST(CachingAllocator, BypassIsReadFromTheEnvironment) {
  const char* name = detail::kAllocatorBypassEnv;
  const char* saved = std::getenv(name);
  const std::string restore = saved == nullptr ? "" : saved;
  ::unsetenv(name);
  EXPECT_EQ(detail::cache_mode_from_env(), CacheMode::Caching);
  ::setenv(name, "0", 1);
  EXPECT_EQ(detail::cache_mode_from_env(), CacheMode::Caching);
  ::setenv(name, "1", 1);
  EXPECT_EQ(detail::cache_mode_from_env(), CacheMode::Bypass);
  ::setenv(name, "yes", 1);
  expect_error([] { (void)detail::cache_mode_from_env(); },
               {"MANTISSA_CUDA_ALLOCATOR_BYPASS", "expected 1", "got 'yes'"});
  if (saved == nullptr) {
    ::unsetenv(name);
  } else {
    ::setenv(name, restore.c_str(), 1);
  }
}

TEST(CachingAllocator, FormatBytes) {
  EXPECT_EQ(detail::format_bytes(512), "512 B");
  EXPECT_EQ(detail::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(detail::format_bytes(3.0 * kMiB), "3.00 MiB");
}

}  // namespace
}  // namespace mantissa::testing
