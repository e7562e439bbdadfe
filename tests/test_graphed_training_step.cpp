// What a training step needs to be captured into a CUDA graph, and the Trainer's cuda_graphs:
// the learning rate read on the device (Optimizer::set_lr_on_device), gradient clipping with no
// host read (nn::clip_grad_norm_on_device_), the Trainer's fallback with its reason on the CPU,
// and, on a GPU, a graphed Trainer run equal to the eager one bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "cuda_test_util.h"
#include "engine/factory.h"
#include "engine/fast_path_stats.h"
#include "engine/generator.h"
#include "nn/clip_grad.h"
#include "nn/loss.h"
#include "nn/optim/adam.h"
#include "nn/optim/schedulers.h"
#include "nn/optim/sgd.h"
#include "runner/data.h"
#include "runner/trainer.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Tensor;
using mt::runner::Trainer;

namespace {

std::vector<uint32_t> bits(const std::vector<Tensor>& ts) {
  std::vector<uint32_t> out;
  for (const Tensor& t : ts) {
    const auto v = t.to(mt::Device::cpu()).to(mt::kFloat32).to_vector<float>();
    const size_t at = out.size();
    out.resize(at + v.size());
    std::memcpy(out.data() + at, v.data(), v.size() * sizeof(float));
  }
  return out;
}

std::vector<Tensor> twin_params(const std::vector<Tensor>& from) {
  std::vector<Tensor> out;
  for (const Tensor& p : from) out.push_back(p.detach().clone().set_requires_grad(true));
  return out;
}

// AdamW with weight decay over a changing learning rate: the rate read on the device gives the
// host rate's bits, group by group.
TEST(LrOnDevice, AdamWStepsEqualTheHostRateBitwise) {
  mt::manual_seed(3);
  const std::vector<Tensor> a = {mt::randn({7, 5}).set_requires_grad(true),
                                 mt::randn({5}).set_requires_grad(true)};
  const std::vector<Tensor> b = twin_params(a);
  auto groups = [](const std::vector<Tensor>& p) {
    return std::vector<mt::optim::ParamGroup>{mt::optim::ParamGroup({p[0]}),
                                              mt::optim::ParamGroup({p[1]}, {{"lr", 0.03}})};
  };
  mt::optim::AdamW host(groups(a), {.lr = 0.01, .weight_decay = 0.1});
  mt::optim::AdamW dev(groups(b), {.lr = 0.01, .weight_decay = 0.1});
  dev.set_lr_on_device(true);
  EXPECT_TRUE(dev.lr_on_device());
  for (int step = 0; step < 6; ++step) {
    const double scale = 1.0 / (1 + step);
    host.param_groups()[0]["lr"] = dev.param_groups()[0]["lr"] = 0.01 * scale;
    host.param_groups()[1]["lr"] = dev.param_groups()[1]["lr"] = 0.03 * scale;
    for (size_t i = 0; i < a.size(); ++i) {
      const Tensor g = mt::randn(a[i].shape());
      a[i].set_grad(g.clone());
      b[i].set_grad(g.clone());
    }
    host.step();
    dev.step();
    ASSERT_EQ(bits(a), bits(b)) << "step " << step;
  }
}

TEST(LrOnDevice, OptimizersThatReadTheRateOnTheHostRefuse) {
  Tensor w = mt::randn({3}).set_requires_grad(true);
  mt::optim::SGD sgd({w}, 0.1);
  mt::testing::expect_error([&] { sgd.set_lr_on_device(true); },
                            {"read the learning rate on the host"});
  EXPECT_FALSE(sgd.lr_on_device());
}

// The device clip scales the gradients exactly as clip_grad_norm_ does (clipping and not, float32
// and bfloat16 gradients) and returns the same norm.
TEST(ClipOnDevice, GradientsAndNormEqualClipGradNorm) {
  for (mt::DType dtype : {mt::kFloat32, mt::kBFloat16}) {
    for (double max_norm : {0.5, 1e3}) {
      mt::manual_seed(5);
      const std::vector<Tensor> a = {mt::randn({11, 3}).to(dtype).set_requires_grad(true),
                                     mt::randn({4}).to(dtype).set_requires_grad(true)};
      const std::vector<Tensor> b = twin_params(a);
      for (size_t i = 0; i < a.size(); ++i) {
        const Tensor g = mt::randn(a[i].shape()).to(dtype);
        a[i].set_grad(g.clone());
        b[i].set_grad(g.clone());
      }
      const double host = mt::nn::clip_grad_norm_(a, max_norm);
      const Tensor dev = mt::nn::clip_grad_norm_on_device_(b, max_norm);
      EXPECT_EQ(dev.to(mt::kFloat64).item<double>(), host) << dtype << " " << max_norm;
      EXPECT_EQ(bits({a[0].grad(), a[1].grad()}), bits({b[0].grad(), b[1].grad()}))
          << dtype << " " << max_norm;
    }
  }
  Tensor none = mt::randn({2}).set_requires_grad(true);
  EXPECT_FALSE(mt::nn::clip_grad_norm_on_device_({none}, 1.0).defined());
}

std::shared_ptr<mt::runner::DataLoader> teacher_loader(int64_t samples, int64_t batch) {
  auto data = mt::runner::make_teacher_dataset({.samples = samples, .seed = 1});
  return std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = batch, .seed = 3});
}

// On the CPU the Trainer cannot capture: it trains eagerly and says why; with the path made
// strict it refuses instead.
TEST(TrainerCudaGraphs, OnTheCpuStepsRunEagerlyAndTheSummarySaysWhy) {
  mt::manual_seed(0);
  auto model = std::make_shared<mt::testing::ToyModel>();
  auto opt =
      std::make_shared<mt::optim::AdamW>(model->parameters(), mt::optim::AdamWOptions{.lr = 1e-2});
  mt::reset_fast_path_stats();
  Trainer trainer(model, mt::nn::MSELoss(), opt, teacher_loader(64, 16),
                  {.max_steps = 6, .log_every = 0, .cuda_graphs = true, .progress = false});
  const auto summary = trainer.fit();
  ASSERT_TRUE(summary.graphed_steps.has_value());
  EXPECT_EQ(*summary.graphed_steps, 0);
  EXPECT_EQ(summary.eager_steps, 6);
  EXPECT_NE(summary.graph_fallback.find("not a CUDA device"), std::string::npos)
      << summary.graph_fallback;
  EXPECT_EQ(mt::fast_path_stats().fell_back("cuda.graphed_step", "refused"), 1);

  mt::set_strict_fast_path("cuda.graphed_step", true);
  Trainer strict(model, mt::nn::MSELoss(), opt, teacher_loader(64, 16),
                 {.max_steps = 2, .log_every = 0, .cuda_graphs = true, .progress = false});
  mt::testing::expect_error([&] { strict.fit(); }, {"cuda_graphs: the device is cpu"});
  mt::set_strict_fast_path("cuda.graphed_step", false);
}

// A graphed run — AdamW over a warm-up + cosine schedule, float16 autocast with a GradScaler,
// gradient clipping, and an epoch's short last batch that runs eagerly — ends with the eager
// run's parameters, bit for bit, and replays most steps from the graph.
TEST(TrainerCudaGraphs, AGraphedRunEqualsTheEagerRunBitwise) {
  MT_REQUIRE_GPU();
  auto run = [](bool graphs, mt::runner::TrainSummary* summary) {
    mt::manual_seed(0);
    auto model = std::make_shared<mt::testing::ToyModel>();
    auto opt = std::make_shared<mt::optim::AdamW>(model->parameters(),
                                                  mt::optim::AdamWOptions{.lr = 1e-2});
    Trainer trainer(model, mt::nn::MSELoss(), opt, teacher_loader(100, 16),
                    {.max_steps = 20,
                     .device = mt::testing::kGpu,
                     .precision = mt::amp::Precision::Float16,
                     .clip_grad_norm = 0.5,
                     .log_every = 5,
                     .cuda_graphs = graphs,
                     .progress = false});
    trainer.set_scheduler(std::make_shared<mt::optim::CosineWarmupLR>(*opt, 4, 20, 1e-4));
    *summary = trainer.fit();
    return bits(model->parameters());
  };
  mt::runner::TrainSummary eager, graphed;
  const auto want = run(false, &eager);
  const auto got = run(true, &graphed);
  EXPECT_EQ(got, want);
  ASSERT_TRUE(graphed.graphed_steps.has_value());
  EXPECT_TRUE(graphed.graph_fallback.empty()) << graphed.graph_fallback;
  EXPECT_GE(*graphed.graphed_steps, 12);
  EXPECT_EQ(*graphed.graphed_steps + graphed.eager_steps, 20);
  EXPECT_EQ(graphed.final_loss, eager.final_loss);
}

}  // namespace
