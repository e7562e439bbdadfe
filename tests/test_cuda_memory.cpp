// The CUDA caching allocator on a device, pinned host memory, and copies: reuse and statistics,
// the out-of-memory message, pin_memory()/is_pinned(), to(cuda, non_blocking) from pinned memory,
// and copies between GPUs. The bookkeeping itself is tested on the CPU in
// test_caching_allocator.cpp. CudaMemoryBuild.* check what a machine without CUDA sees.
#include <cstdint>
#include <vector>

#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Device;
using mt::Tensor;
using mt::TensorOptions;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::HeldStream;
using mt::testing::kGpu;

namespace {

// ---- without CUDA -------------------------------------------------------------------------------
TEST(CudaMemoryBuild, PinMemoryNeedsCuda) {
  if (mt::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  const Tensor x = mt::ones({4});
  EXPECT_FALSE(x.is_pinned());
  expect_error([&] { (void)x.pin_memory(); }, {"pin_memory", "pinned host memory needs"});
  // non_blocking is a hint: CPU to CPU is the identity.
  EXPECT_TRUE(x.to(Device::cpu(), /*non_blocking=*/true).is_same(x));
}

// ---- the device allocator ---------------------------------------------------------------------
TEST(CudaMemory, SteadyStateTrainingLoopNeedsNoCudaMalloc) {
  MT_REQUIRE_GPU();
  MT_REQUIRE_CUDA_CACHING();
  auto step = [] {
    // Mixed sizes, small and large, with temporaries freed in between.
    Tensor a = mt::randn({256, 256}, kGpu);
    Tensor b = mt::randn({1024, 1024}, kGpu);
    Tensor c = (a.matmul(a) + 1.0f).relu();
    Tensor d = (b * 2.0f).sum();
    (void)c;
    (void)d;
  };
  step();
  step();
  mt::cuda::synchronize(0);
  const auto s0 = mt::cuda::memory_stats(0);
  for (int i = 0; i < 10; ++i) step();
  mt::cuda::synchronize(0);
  const auto s1 = mt::cuda::memory_stats(0);
  EXPECT_EQ(s1.num_cuda_mallocs, s0.num_cuda_mallocs);
  EXPECT_EQ(s1.num_cuda_frees, s0.num_cuda_frees);
  EXPECT_GT(s1.num_cache_hits, s0.num_cache_hits);
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes);
}

TEST(CudaMemory, SmallTensorsShareASegmentAndSplitBlocksMerge) {
  MT_REQUIRE_GPU();
  MT_REQUIRE_CUDA_CACHING();
  mt::cuda::empty_cache();
  const auto s0 = mt::cuda::memory_stats(0);
  std::vector<Tensor> ts;
  for (int i = 0; i < 16; ++i) ts.push_back(mt::empty({1000}, kGpu));  // 4 KiB each
  const auto s1 = mt::cuda::memory_stats(0);
  EXPECT_LE(s1.num_cuda_mallocs - s0.num_cuda_mallocs, 1);  // one 2 MiB segment at most
  EXPECT_GE(s1.num_splits - s0.num_splits, 15);
  ts.clear();
  const auto s2 = mt::cuda::memory_stats(0);
  EXPECT_GE(s2.num_merges - s1.num_merges, 15);
  EXPECT_EQ(s2.allocated_bytes, s0.allocated_bytes);
  // Every segment made for them is whole and free again: empty_cache returns it.
  mt::cuda::empty_cache();
  EXPECT_EQ(mt::cuda::memory_stats(0).reserved_bytes, s0.reserved_bytes);
}

TEST(CudaMemory, OutOfMemoryMessageHasTheNumbers) {
  MT_REQUIRE_GPU();
  const auto before = mt::cuda::memory_stats(0);
  expect_error([] { mt::empty({int64_t{1} << 50}, TensorOptions(kGpu).dtype(mt::kUInt8)); },
               {"CUDA out of memory on cuda:0", "tried to allocate 1.00 PiB", "allocated",
                "reserved", "free of", "retried"});
  EXPECT_EQ(mt::cuda::memory_stats(0).num_oom_retries, before.num_oom_retries + 1);
  const Tensor x = mt::ones({8}, kGpu) * 3.0f;
  EXPECT_EQ(x.to_vector<float>(), std::vector<float>(8, 3.0f));
}

// ---- pinned memory and copies -------------------------------------------------------------------
TEST(CudaMemory, PinMemoryCopiesIntoPinnedStorage) {
  MT_REQUIRE_GPU();
  const Tensor x = mt::randn({3, 5});
  EXPECT_FALSE(x.is_pinned());
  const Tensor p = x.pin_memory();
  EXPECT_TRUE(p.is_pinned());
  EXPECT_TRUE(p.device().is_cpu());
  EXPECT_EQ(p.to_vector<float>(), x.to_vector<float>());
  EXPECT_TRUE(p.pin_memory().is_same(p));     // already pinned
  EXPECT_TRUE(p.slice(1, 1, 3).is_pinned());  // views of pinned memory are pinned
  // Non-contiguous sources are packed.
  const Tensor t = x.t().pin_memory();
  EXPECT_TRUE(t.is_contiguous());
  expect_close(t, x.t(), 0, 0, "pinned transpose");
  expect_error([] { (void)mt::ones({2}, kGpu).pin_memory(); }, {"pin_memory", "only CPU"});
}

TEST(CudaMemory, NonBlockingCopyFromPinnedEqualsCpuData) {
  MT_REQUIRE_GPU();
  for (int round = 0; round < 3; ++round) {
    const Tensor host = mt::randn({512, 33}).pin_memory();
    const Tensor gpu = host.to(kGpu, /*non_blocking=*/true);
    // Reading on the same stream is ordered after the copy.
    expect_close(gpu.cpu(), host, 0, 0, "non_blocking H2D");
    // Pageable memory with non_blocking falls back to a synchronous copy.
    const Tensor pageable = mt::randn({7, 9});
    expect_close(pageable.to(kGpu, true).cpu(), pageable, 0, 0, "pageable H2D");
  }
}

TEST(CudaMemory, PinnedBlockOfAnInFlightCopyIsNotReusedEarly) {
  MT_REQUIRE_GPU();
  // The copy is queued behind a hold, so it cannot have run when its pinned source is freed. A
  // tensor pinned next must get another block (its data would otherwise reach the GPU instead),
  // and once the copy is done the block is handed out again.
  constexpr int64_t kNumel = 1 << 16;
  mt::cuda::synchronize(0);
  mt::cuda::empty_cache();  // settles and empties the pinned cache too
  const mt::cuda::Stream s = mt::cuda::Stream::create(0);
  const mt::cuda::StreamGuard on_s(s);
  {
    // Warm both caches: nothing below needs cudaHostAlloc or cudaMalloc while s is held.
    const Tensor a = mt::empty({kNumel}).pin_memory(), b = mt::empty({kNumel}).pin_memory();
    const Tensor g = mt::empty({kNumel}, kGpu);
  }
  const Tensor src = mt::full({kNumel}, 7.0);
  Tensor gpu, next;
  void* first = nullptr;
  {
    HeldStream hold(s);
    {
      const Tensor pinned = src.pin_memory();
      first = pinned.data_ptr();
      gpu = pinned.to(kGpu, /*non_blocking=*/true);
    }
    EXPECT_FALSE(s.query()) << "the held stream ran ahead";
    next = mt::full({kNumel}, -1.0).pin_memory();
    EXPECT_NE(next.data_ptr(), first) << "pinned block reused while its copy was pending";
    EXPECT_FALSE(hold.timed_out());
  }  // released, and s has finished the copy
  expect_close(gpu.cpu(), src, 0, 0, "copy from a freed pinned block");
  const Tensor again = mt::empty({kNumel}).pin_memory();
  EXPECT_EQ(again.data_ptr(), first);
}

TEST(CudaMemory, CopyBetweenGpus) {
  MT_REQUIRE_GPU();
  if (mt::cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const Tensor x = mt::randn({64, 64});
  const Tensor a = x.to(Device::cuda(0));
  const Tensor b = a.to(Device::cuda(1));
  EXPECT_EQ(b.device(), Device::cuda(1));
  const Tensor back = (b * 2.0f).to(Device::cuda(0));
  expect_close(back.cpu(), x * 2.0f, 0, 0, "cuda:0 -> cuda:1 -> cuda:0");
}

}  // namespace
