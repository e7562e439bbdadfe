// Streams and events (cuda/stream.h): the current stream and StreamGuard, ordering work
// between streams with events, per-stream reuse in the caching allocator, record_stream, and what
// a machine without CUDA sees (CudaStreamsBuild.*).
#include <vector>

#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "test_util.h"

namespace mt = mantissa;
namespace cuda = mantissa::cuda;
using mt::Tensor;
using mt::TensorOptions;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::HeldStream;
using mt::testing::kGpu;

namespace {

// ---- without CUDA -------------------------------------------------------------------------------
TEST(CudaStreamsBuild, EveryUseIsAClearError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  // The same message as any other use of a missing device: it says whether the build lacks CUDA
  // or the machine lacks a GPU.
  const std::vector<std::string> parts{"cuda:0", "requested"};
  expect_error([] { (void)cuda::Stream::create(0); }, parts);
  expect_error([] { (void)cuda::current_stream(); }, parts);
  expect_error([] { (void)cuda::Stream::default_stream(0); }, parts);
  expect_error(
      [] {
        cuda::Event e;
        e.record();
      },
      parts);
  expect_error([] { cuda::synchronize(0); }, parts);
  expect_error(
      [] {
        cuda::Graph g;
        g.capture_begin();
      },
      parts);
  expect_error(
      [] {
        cuda::GraphedStep step([] {});
        step();
      },
      parts);
  EXPECT_FALSE(cuda::is_current_stream_capturing());
  cuda::Graph unused;  // constructing and destroying an unused graph is fine everywhere
  EXPECT_FALSE(unused.captured());
}

// ---- streams ------------------------------------------------------------------------------------
TEST(CudaStreams, GuardSetsAndRestoresTheCurrentStream) {
  MT_REQUIRE_GPU();
  const cuda::Stream def = cuda::Stream::default_stream(0);
  EXPECT_TRUE(def.is_default());
  EXPECT_EQ(cuda::current_stream(0), def);
  const cuda::Stream s = cuda::Stream::create(0);
  EXPECT_FALSE(s.is_default());
  {
    cuda::StreamGuard guard(s);
    EXPECT_EQ(cuda::current_stream(0), s);
    EXPECT_EQ(cuda::current_device(), 0);
    const cuda::Stream hi = cuda::Stream::create(0, /*priority=*/-1);
    {
      cuda::StreamGuard inner(hi);
      EXPECT_EQ(cuda::current_stream(), hi);
    }
    EXPECT_EQ(cuda::current_stream(), s);
  }
  EXPECT_EQ(cuda::current_stream(0), def);
}

TEST(CudaStreams, OpsOnASideStreamMatchTheCpu) {
  MT_REQUIRE_GPU();
  const Tensor x = mt::randn({300, 200});
  const Tensor w = mt::randn({200, 50});
  const cuda::Stream s = cuda::Stream::create(0);
  Tensor y;
  {
    cuda::StreamGuard guard(s);
    const Tensor xg = x.to(kGpu);  // the copy is queued on s too
    y = (xg.matmul(w.to(kGpu)) * 0.5f).relu().sum(mt::Shape{1});
    s.synchronize();
    EXPECT_TRUE(s.query());
  }
  expect_close(y.cpu(), (x.matmul(w) * 0.5f).relu().sum(mt::Shape{1}), 1e-4, 1e-4, "side stream");
}

TEST(CudaStreams, EventsOrderWorkBetweenStreams) {
  MT_REQUIRE_GPU();
  const cuda::Stream producer = cuda::Stream::create(0);
  const cuda::Stream consumer = cuda::Stream::create(0);
  for (int round = 0; round < 5; ++round) {
    Tensor buf = mt::zeros({1 << 20}, kGpu);
    cuda::synchronize(0);
    cuda::Event ready;
    {
      cuda::StreamGuard guard(producer);
      // Enough work that an unordered reader would see a partial result.
      for (int i = 0; i < 20; ++i) buf.add_(mt::ones({1 << 20}, kGpu));
      ready.record(producer);
      // buf belongs to the default stream but is used on both others.
      cuda::record_stream(buf, producer);
      cuda::record_stream(buf, consumer);
    }
    Tensor total;
    {
      consumer.wait(ready);
      cuda::StreamGuard guard(consumer);
      total = buf.sum();
      consumer.synchronize();
    }
    EXPECT_EQ(total.item<float>(), 20.0f * (1 << 20)) << "round " << round;
  }
}

TEST(CudaStreams, EventTimingAndQueries) {
  MT_REQUIRE_GPU();
  cuda::Event unrecorded;
  EXPECT_FALSE(unrecorded.recorded());
  EXPECT_TRUE(unrecorded.query());
  cuda::Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
  start.record();
  Tensor x = mt::randn({512, 512}, kGpu);
  for (int i = 0; i < 5; ++i) x = x.matmul(x).tanh();
  end.record();
  end.synchronize();
  EXPECT_TRUE(end.query());
  EXPECT_GE(start.elapsed_ms(end), 0.0f);
  cuda::Event untimed;
  untimed.record();
  expect_error([&] { (void)untimed.elapsed_ms(end); }, {"elapsed_ms", "enable_timing"});
}

// ---- the allocator and streams ------------------------------------------------------------------
TEST(CudaStreams, FreedBlocksAreReusedOnlyOnTheirStream) {
  MT_REQUIRE_GPU();
  MT_REQUIRE_CUDA_CACHING();
  const cuda::Stream s = cuda::Stream::create(0);
  void* on_s = nullptr;
  {
    cuda::StreamGuard guard(s);
    Tensor t = mt::empty({4096}, kGpu);
    on_s = t.data_ptr();
  }
  // Freed on s: the default stream must not get it (its work is not ordered after s's).
  Tensor d = mt::empty({4096}, kGpu);
  EXPECT_NE(d.data_ptr(), on_s);
  {
    cuda::StreamGuard guard(s);
    Tensor again = mt::empty({4096}, kGpu);
    EXPECT_EQ(again.data_ptr(), on_s);
  }
  s.synchronize();
}

TEST(CudaStreams, RecordStreamDelaysReuse) {
  MT_REQUIRE_GPU();
  // 4 MiB is a large request that fills its segment exactly, and the default stream's cache
  // starts empty: the only block that could serve u below is t's. `other` is held, so the work
  // that reads t there cannot have run when t is freed.
  constexpr int64_t kNumel = int64_t{1} << 20;
  cuda::synchronize(0);
  cuda::empty_cache();
  const cuda::Stream other = cuda::Stream::create(0);
  void* block = nullptr;
  // Freed only after the hold: with the cache bypassed a free is a cudaFree, which would wait for
  // the held stream.
  Tensor u, doubled, total;
  {
    HeldStream hold(other);
    {
      Tensor t = mt::ones({kNumel}, kGpu);
      block = t.data_ptr();
      other.wait(cuda::current_stream());
      {
        cuda::StreamGuard guard(other);
        doubled = t * 2.0f;
        total = doubled.sum();
      }
      cuda::record_stream(t, other);
    }
    EXPECT_FALSE(other.query()) << "the held stream ran ahead";
    u = mt::empty({kNumel}, kGpu);
    EXPECT_NE(u.data_ptr(), block) << "reused while a stream that reads it is still busy";
    EXPECT_FALSE(hold.timed_out());
  }  // released, and `other` has finished
  // Now the block is free again on its own stream (u, still alive, is not a candidate).
  const Tensor v = mt::empty({kNumel}, kGpu);
  if (!mt::testing::cuda_cache_bypassed()) {
    EXPECT_EQ(v.data_ptr(), block);
  }
  expect_error([] { cuda::record_stream(mt::ones({2}), cuda::current_stream()); },
               {"record_stream", "CUDA tensor"});
}

}  // namespace
