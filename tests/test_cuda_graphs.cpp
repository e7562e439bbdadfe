// CUDA graphs (cuda/stream.h): capture and replay of plain ops with static inputs, a whole
// ToyModel training step (forward, MSE loss, backward, optional GradScaler, SGD) as a GraphedStep
// that must match eager training step for step, the allocator's private graph pool, the clear
// error for a host sync inside a capture, a capture while freed blocks still wait for another
// stream, and a matmul captured on a stream cuBLAS has never seen. Every test needs a GPU.
#include <memory>
#include <string>
#include <vector>

#include "cuda/stream.h"
#include "cuda_test_util.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
namespace cuda = mantissa::cuda;
using mt::Tensor;
using mt::testing::expect_close;
using mt::testing::expect_error;
using mt::testing::HeldStream;
using mt::testing::kGpu;

namespace {

using mt::testing::ToyModel;

// Two models on the GPU with the same parameters.
std::pair<std::shared_ptr<ToyModel>, std::shared_ptr<ToyModel>> twin_models() {
  auto a = std::make_shared<ToyModel>();
  auto b = std::make_shared<ToyModel>();
  a->to(kGpu);
  b->to(kGpu);
  mt::autograd::NoGradGuard no_grad;
  const auto pa = a->parameters();
  auto pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
  return {a, b};
}

TEST(CudaGraphs, CaptureAndReplayWithStaticInputs) {
  MT_REQUIRE_GPU();
  Tensor x = mt::zeros({1000}, kGpu);
  Tensor y;
  cuda::Graph graph;
  cuda::capture(graph, [&] { y = (x * 2.0f + 1.0f).relu(); });
  EXPECT_TRUE(graph.captured());
  EXPECT_GT(cuda::memory_stats(0).graph_pool_bytes, 0);  // y lives in the graph's pool
  EXPECT_EQ(cuda::current_stream(0), cuda::Stream::default_stream(0));  // restored
  for (int i = 0; i < 4; ++i) {
    const Tensor data = mt::randn({1000});
    x.copy_(data);
    graph.replay();
    expect_close(y.cpu(), (data * 2.0f + 1.0f).relu(), 0, 0, "replay " + std::to_string(i));
  }
  expect_error([&] { graph.capture_begin(); }, {"capture_begin", "reset()"});
  graph.reset();
  EXPECT_FALSE(graph.captured());
  expect_error([&] { graph.replay(); }, {"replay", "nothing captured"});
}

TEST(CudaGraphs, HostSyncDuringCaptureIsAClearError) {
  MT_REQUIRE_GPU();
  const Tensor x = mt::ones({16}, kGpu);
  cuda::Graph graph;
  expect_error([&] { cuda::capture(graph, [&] { (void)x.sum().item<float>(); }); },
               {"while a CUDA graph is being captured", "item()"});
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(cuda::is_current_stream_capturing());
  EXPECT_EQ(cuda::current_stream(0), cuda::Stream::default_stream(0));
  // The device and the graph are still usable.
  EXPECT_EQ(x.sum().item<float>(), 16.0f);
  Tensor y;
  cuda::capture(graph, [&] { y = x * 3.0f; });
  graph.replay();
  EXPECT_EQ(y.sum().item<float>(), 48.0f);
}

// Trains twin models on the same batches, one eagerly and one through a GraphedStep, and expects
// the same losses and parameters after every step.
void train_eager_vs_graphed(bool use_scaler) {
  const int64_t capture_mallocs = cuda::memory_stats(0).num_capture_mallocs;
  auto [eager, graphed] = twin_models();
  mt::optim::SGD opt_e(eager->parameters(), 0.05, {.momentum = 0.9});
  mt::optim::SGD opt_g(graphed->parameters(), 0.05, {.momentum = 0.9});
  mt::amp::GradScaler scaler_e(use_scaler), scaler_g(use_scaler);

  auto step = [&](ToyModel& model, mt::optim::SGD& opt, mt::amp::GradScaler& scaler,
                  const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = nn::functional::mse_loss(model.forward(x), y);
    if (use_scaler) {
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    } else {
      loss.backward();
      opt.step();
    }
    return loss;
  };

  // The graph reads its input from static tensors and leaves its loss in one.
  Tensor static_x = mt::zeros({16, 10}, kGpu), static_y = mt::zeros({16, 5}, kGpu);
  Tensor static_loss = mt::zeros({}, kGpu);
  cuda::GraphedStep graphed_step(
      [&] {
        Tensor loss = step(*graphed, opt_g, scaler_g, static_x, static_y);
        static_loss.copy_(loss.detach());
      },
      /*warmup_steps=*/3);

  for (int i = 0; i < 8; ++i) {
    const Tensor x = mt::randn({16, 10}), y = mt::randn({16, 5});
    const Tensor loss_e = step(*eager, opt_e, scaler_e, x.to(kGpu), y.to(kGpu));
    static_x.copy_(x);
    static_y.copy_(y);
    graphed_step();
    EXPECT_EQ(graphed_step.captured(), i >= 3);
    expect_close(static_loss.cpu(), loss_e.detach().cpu(), 1e-5, 1e-6,
                 "loss at step " + std::to_string(i));
    const auto pe = eager->parameters(), pg = graphed->parameters();
    for (size_t k = 0; k < pe.size(); ++k)
      expect_close(pg[k].cpu(), pe[k].cpu(), 1e-5, 1e-6, "parameter " + std::to_string(k));
  }
  // The warm-up ran in the graph's pool, so the capture found every block cached.
  if (!mt::testing::cuda_cache_bypassed()) {
    EXPECT_EQ(cuda::memory_stats(0).num_capture_mallocs, capture_mallocs);
  }
}

TEST(CudaGraphs, GraphedTrainingStepMatchesEager) {
  MT_REQUIRE_GPU();
  train_eager_vs_graphed(/*use_scaler=*/false);
}

TEST(CudaGraphs, GraphedTrainingStepWithGradScalerMatchesEager) {
  MT_REQUIRE_GPU();
  train_eager_vs_graphed(/*use_scaler=*/true);
}

TEST(CudaGraphs, PoolIsReleasedWithTheGraph) {
  MT_REQUIRE_GPU();
  cuda::empty_cache();
  const int64_t before = cuda::memory_stats(0).graph_pool_bytes;
  {
    const Tensor x = mt::ones({1 << 20}, kGpu);
    cuda::Graph graph;
    cuda::capture(graph, [&] { (void)(x * 2.0f).sum(); });  // temporaries only
    EXPECT_GT(cuda::memory_stats(0).graph_pool_bytes, before);
    graph.replay();
  }
  EXPECT_EQ(cuda::memory_stats(0).graph_pool_bytes, before);
}

TEST(CudaGraphs, CaptureWhileAFreedBlockWaitsForAnotherStream) {
  MT_REQUIRE_GPU();
  // t is freed while `other`, held, has not run the work that reads it: its block waits for an
  // event there. The capture then allocates; the allocator must neither query that event (which
  // would invalidate the capture) nor hand the block out.
  const cuda::Stream other = cuda::Stream::create(0);
  Tensor x = mt::zeros({1 << 16}, kGpu);
  cuda::Graph graph;
  Tensor y;
  void* pending = nullptr;
  // Freed only after the hold: with the cache bypassed a free is a cudaFree, which would wait for
  // the held stream.
  Tensor doubled, total;
  {
    HeldStream hold(other);
    {
      Tensor t = mt::ones({1 << 16}, kGpu);
      pending = t.data_ptr();
      other.wait(cuda::current_stream());
      {
        cuda::StreamGuard guard(other);
        doubled = t * 2.0f;
        total = doubled.sum();
      }
      cuda::record_stream(t, other);
    }
    EXPECT_FALSE(other.query()) << "the held stream ran ahead";
    cuda::capture(graph, [&] {
      const Tensor tmp = x * 2.0f;  // allocations inside the capture
      y = (tmp + 1.0f).relu();
    });
    EXPECT_TRUE(graph.captured());
    EXPECT_NE(y.data_ptr(), pending);
    EXPECT_FALSE(hold.timed_out());
  }  // released; the freed block's event completes
  for (int i = 0; i < 2; ++i) {
    const Tensor data = mt::randn({1 << 16});
    x.copy_(data);
    graph.replay();
    expect_close(y.cpu(), (data * 2.0f + 1.0f).relu(), 0, 0, "replay " + std::to_string(i));
  }
}

TEST(CudaGraphs, MatmulCapturedOnAFreshStreamWithoutWarmUp) {
  MT_REQUIRE_GPU();
  // The graph's side stream is new, so its first cuBLAS call, and the making of its cuBLAS
  // workspace, happen inside the capture. Only the process-wide cuBLAS handle exists already
  // (made here on the default stream; creating a handle cannot be captured).
  (void)mt::ones({2, 2}, kGpu).mm(mt::ones({2, 2}, kGpu));
  Tensor a = mt::zeros({64, 96}, kGpu), b = mt::zeros({96, 80}, kGpu);
  cuda::Graph graph;
  Tensor c;
  cuda::capture(graph, [&] { c = a.mm(b); });
  ASSERT_TRUE(graph.captured());
  for (int i = 0; i < 2; ++i) {
    const Tensor a_cpu = mt::randn({64, 96}), b_cpu = mt::randn({96, 80});
    a.copy_(a_cpu);
    b.copy_(b_cpu);
    graph.replay();
    expect_close(c.cpu(), a_cpu.mm(b_cpu), 1e-4, 1e-4, "replay " + std::to_string(i));
  }
}

}  // namespace
