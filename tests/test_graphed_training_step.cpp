// What a training step needs to be captured into a CUDA graph, and the Trainer's cuda_graphs:
// the learning rate read on the device (Optimizer::set_lr_on_device), gradient clipping with no
// host read (nn::clip_grad_norm_on_device_), what a capture cannot hold (engine/graph_capture.h:
// host reads and random draws, refused with a reason), the Trainer's fallback with its reason on
// the CPU and, through graph emulation (cuda::detail::EmulatedGraphs), its refusal path for a GPT
// step; on a GPU, graphed Trainer runs equal to the eager one bit for bit and to the CPU's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "cuda_test_util.h"
#include "engine/factory.h"
#include "engine/fast_path_stats.h"
#include "engine/generator.h"
#include "engine/graph_capture.h"
#include "engine/precision.h"
#include "nn/clip_grad.h"
#include "nn/functional.h"
#include "nn/loss.h"
#include "nn/optim/adam.h"
#include "nn/optim/muon.h"
#include "nn/optim/schedulers.h"
#include "nn/optim/sgd.h"
#include "nn/transformer.h"
#include "runner/data/data.h"
#include "runner/training/trainer.h"
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
// run's parameters, bit for bit, and replays most steps from the graph; in float32 (no TF32) it
// ends within the GEMMs' reassociation, grown over 20 AdamW steps, of the CPU's run.
TEST(TrainerCudaGraphs, AGraphedRunEqualsTheEagerRunBitwiseAndTheCpuRunClosely) {
  MT_REQUIRE_GPU();
  auto run = [](bool graphs, mt::Device device, mt::amp::Precision precision,
                mt::runner::TrainSummary* summary) {
    mt::manual_seed(0);
    auto model = std::make_shared<mt::testing::ToyModel>();
    auto opt = std::make_shared<mt::optim::AdamW>(model->parameters(),
                                                  mt::optim::AdamWOptions{.lr = 1e-2});
    Trainer trainer(model, mt::nn::MSELoss(), opt, teacher_loader(100, 16),
                    {.max_steps = 20,
                     .device = device,
                     .precision = precision,
                     .clip_grad_norm = 0.5,
                     .log_every = 5,
                     .cuda_graphs = graphs,
                     .progress = false});
    trainer.set_scheduler(std::make_shared<mt::optim::CosineWarmupLR>(*opt, 4, 20, 1e-4));
    *summary = trainer.fit();
    return bits(model->parameters());
  };
  const mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  for (mt::amp::Precision precision : {mt::amp::Precision::Float16, mt::amp::Precision::Float32}) {
    mt::runner::TrainSummary eager, graphed, cpu;
    const auto want = run(false, mt::testing::kGpu, precision, &eager);
    const auto got = run(true, mt::testing::kGpu, precision, &graphed);
    EXPECT_EQ(got, want);
    ASSERT_TRUE(graphed.graphed_steps.has_value());
    EXPECT_TRUE(graphed.graph_fallback.empty()) << graphed.graph_fallback;
    EXPECT_GE(*graphed.graphed_steps, 12);
    EXPECT_EQ(*graphed.graphed_steps + graphed.eager_steps, 20);
    EXPECT_EQ(graphed.final_loss, eager.final_loss);
    if (precision != mt::amp::Precision::Float32) continue;
    const auto on_cpu = run(false, mt::Device::cpu(), precision, &cpu);
    ASSERT_EQ(on_cpu.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i) {
      float a = 0, b = 0;
      std::memcpy(&a, &got[i], sizeof a);
      std::memcpy(&b, &on_cpu[i], sizeof b);
      EXPECT_NEAR(a, b, 1e-4 + 1e-3 * std::fabs(b)) << "element " << i;
    }
  }
  mt::set_float32_matmul_precision(saved);
}

// ---- what a capture cannot hold ---------------------------------------------------------------

// A probe records the first host read or random draw, on any device; an emulated capture throws
// GraphCaptureError with the reason instead; outside both nothing happens.
TEST(GraphCapture, AProbeRecordsWhatACaptureRefuses) {
  const Tensor x = mt::randn({3});
  {
    mt::detail::CaptureProbe probe;
    (void)(x * 2.0);
    EXPECT_EQ(probe.first(), "");
    (void)mt::sum(x).item<float>();
    (void)mt::rand({2});
    EXPECT_NE(probe.first().find("item() on cpu reads on the host"), std::string::npos)
        << probe.first();
  }
  {
    mt::detail::CaptureProbe outer;
    {
      mt::detail::CaptureProbe inner;
      (void)mt::rand({2});
      EXPECT_NE(inner.first().find("uniform_ on cpu draws random numbers"), std::string::npos);
    }
    EXPECT_NE(outer.first().find("uniform_"), std::string::npos) << outer.first();
  }
  mt::detail::EmulatedCapture capture;
  EXPECT_THROW((void)mt::sum(x).item<float>(), mt::GraphCaptureError);
  mt::testing::expect_error([&] { (void)mt::randn({2}); },
                            {"normal_ on cpu draws random numbers", "every replay"});
  mt::testing::expect_error([&] { (void)x.str(); }, {"printing a tensor"});
  mt::testing::expect_error([&] { (void)x.to_vector<float>(); }, {"to_vector()"});
  (void)(x * 2.0);  // device work with no host read captures
}

namespace {

struct GptRun {
  mt::runner::TrainSummary summary;
  std::vector<uint32_t> params;
};

// `steps` AdamW steps of a tiny GPT on random tokens (the fused lm_head + cross-entropy or the
// logits and cross_entropy), with `extra` called on the forward's output; with `emulate`, under
// graph emulation.
GptRun train_gpt(int64_t steps, bool graphs, bool emulate, bool fused_head, double dropout = 0.0,
                 std::function<void(const Tensor&)> extra = {},
                 mt::Device device = mt::Device::cpu(),
                 mt::amp::Precision precision = mt::amp::Precision::Float32, bool muon = false) {
  std::optional<mt::cuda::detail::EmulatedGraphs> emulation;
  if (emulate) emulation.emplace();
  mt::manual_seed(0);
  auto gpt = std::make_shared<mt::nn::GPTImpl>(mt::testing::tiny_gpt_config(dropout));
  auto data = std::make_shared<mt::runner::TensorDataset>(mt::randint(0, 32, {24, 8}),
                                                          mt::randint(0, 32, {24, 8}));
  auto loader = std::make_shared<mt::runner::DataLoader>(
      data, mt::runner::DataLoaderOptions{.batch_size = 4, .seed = 3});
  mt::runner::ForwardFn forward = [gpt, fused_head, extra](const Tensor& idx) {
    const Tensor out = fused_head ? gpt->hidden_states(idx) : gpt->forward(idx);
    if (extra) extra(out);
    return out;
  };
  mt::runner::LossFn loss = [gpt, fused_head](const Tensor& out, const Tensor& target) {
    if (fused_head) return gpt->head_loss(out, target);
    return mt::nn::functional::cross_entropy(out.reshape({-1, out.size(2)}), target.reshape({-1}));
  };
  std::shared_ptr<mt::optim::Optimizer> opt =
      std::make_shared<mt::optim::AdamW>(gpt->parameters(), mt::optim::AdamWOptions{.lr = 1e-2});
  if (muon) {
    opt = std::make_shared<mt::optim::Muon>(
        mt::optim::muon_groups(*gpt, mt::optim::muon_split(*gpt), {.lr = 0.02}, {.lr = 1e-2}));
  }
  Trainer trainer(gpt, forward, loss, opt, loader,
                  {.max_steps = steps,
                   .device = device,
                   .precision = precision,
                   .log_every = 2,
                   .cuda_graphs = graphs,
                   .progress = false});
  GptRun r;
  r.summary = trainer.fit();
  r.params = bits(gpt->parameters());
  return r;
}

}  // namespace

// The GPT step (embedding, attention, the fused head or the logits' cross_entropy, AdamW) has
// nothing a capture refuses: under graph emulation it is "captured" after its warm-ups and
// trains exactly as the eager run.
TEST(TrainerCudaGraphs, TheGptStepIsCapturedUnderEmulation) {
  for (bool fused : {false, true}) {
    const GptRun eager = train_gpt(8, false, false, fused);
    mt::reset_fast_path_stats();
    const GptRun graphed = train_gpt(8, true, true, fused);
    EXPECT_TRUE(graphed.summary.graph_fallback.empty()) << graphed.summary.graph_fallback;
    ASSERT_TRUE(graphed.summary.graphed_steps.has_value());
    EXPECT_EQ(*graphed.summary.graphed_steps, 5) << "fused " << fused;
    EXPECT_EQ(graphed.summary.eager_steps, 3);
    EXPECT_EQ(mt::fast_path_stats().ran("cuda.graphed_step", "replay"), 5);
    EXPECT_EQ(graphed.params, eager.params) << "fused " << fused;
  }
}

// Muon's step reads found_inf and its step counts on the host: the run says so before any
// warm-up and trains eagerly, as it would without graphs.
TEST(TrainerCudaGraphs, AMuonStepIsNamedAndRunsEagerly) {
  const GptRun eager = train_gpt(6, false, false, false, 0.0, {}, mt::Device::cpu(),
                                 mt::amp::Precision::Float32, true);
  const GptRun graphed = train_gpt(6, true, true, false, 0.0, {}, mt::Device::cpu(),
                                   mt::amp::Precision::Float32, true);
  EXPECT_NE(graphed.summary.graph_fallback.find("the Muon step reads on the host"),
            std::string::npos)
      << graphed.summary.graph_fallback;
  EXPECT_EQ(graphed.summary.graphed_steps.value_or(0), 0);
  EXPECT_EQ(graphed.summary.eager_steps, 6);
  EXPECT_EQ(graphed.params, eager.params);
}

// Each thing a capture cannot hold, put into the GPT's step, gives the run a reason (in its
// summary, and as an error once the path is strict), not a crash: the warm-up that meets it
// stops the graphing and the run trains on eagerly, as the eager run does.
TEST(TrainerCudaGraphs, EveryUncapturableStepGetsAReasonNotACrash) {
  struct Case {
    const char* reason;
    double dropout;
    std::function<void(const Tensor&)> extra;
  };
  const std::vector<Case> cases = {
      {"item() on cpu", 0.0, [](const Tensor& h) { (void)mt::sum(h).item<float>(); }},
      {"to_vector() on cpu", 0.0, [](const Tensor& h) { (void)h.to_vector<float>(); }},
      {"printing a tensor on cpu", 0.0,
       [](const Tensor& h) {
         std::ostringstream os;
         os << h.narrow(0, 0, 1);
       }},
      {"bernoulli_ (dropout) on cpu draws random numbers", 0.1, {}},
      {"scaled_dot_product_attention's dropout on cpu", 0.0,
       [](const Tensor& h) {
         const Tensor q = h.detach().reshape({h.size(0), 1, h.size(1), h.size(2)});
         (void)mt::nn::functional::scaled_dot_product_attention(q, q, q, {}, 0.5);
       }},
      {"uniform_ on cpu", 0.0, [](const Tensor& h) { (void)mt::rand_like(h); }},
      {"normal_ on cpu", 0.0, [](const Tensor& h) { (void)mt::randn_like(h); }},
      {"randint on cpu", 0.0, [](const Tensor&) { (void)mt::randint(0, 4, {2}); }},
  };
  for (const Case& c : cases) {
    const GptRun eager = train_gpt(6, false, false, false, c.dropout, c.extra);
    mt::reset_fast_path_stats();
    const GptRun graphed = train_gpt(6, true, true, false, c.dropout, c.extra);
    EXPECT_NE(graphed.summary.graph_fallback.find(std::string("the step cannot be captured: ") +
                                                  c.reason),
              std::string::npos)
        << graphed.summary.graph_fallback;
    ASSERT_TRUE(graphed.summary.graphed_steps.has_value());
    EXPECT_EQ(*graphed.summary.graphed_steps, 0) << c.reason;
    EXPECT_EQ(graphed.summary.eager_steps, 6) << c.reason;
    EXPECT_EQ(mt::fast_path_stats().fell_back("cuda.graphed_step", "uncapturable"), 1) << c.reason;
    EXPECT_EQ(graphed.params, eager.params) << c.reason;

    mt::set_strict_fast_path("cuda.graphed_step", true);
    mt::testing::expect_error([&] { (void)train_gpt(6, true, true, false, c.dropout, c.extra); },
                              {"cuda_graphs: the step cannot be captured", c.reason});
    mt::set_strict_fast_path("cuda.graphed_step", false);
  }
}

// What the warm-ups did not meet but the capture does (here a host read from the fourth step on)
// ends the run with both reasons: the capture did not run the step, so going on could skip it.
TEST(TrainerCudaGraphs, ACaptureRefusedAfterCleanWarmUpsIsAnError) {
  auto calls = std::make_shared<int>(0);
  mt::testing::expect_error(
      [&] {
        (void)train_gpt(6, true, true, false, 0.0, [calls](const Tensor& h) {
          if (++*calls > 3) (void)mt::sum(h).item<float>();
        });
      },
      {"capturing the training step failed although its eager warm-up steps ran clean",
       "item() on cpu", "cuda_graphs: false"});
}

// On a GPU the GPT step is captured for real: with the logits' cross_entropy and with the fused
// head, in float32 and under bf16 autocast, the graphed run is the eager GPU run bit for bit, and
// in float32 (no TF32) the CPU's run within the GEMMs' reassociation, grown over 12 AdamW steps.
TEST(TrainerCudaGraphs, TheGptStepIsCapturedOnAGpuAndMatchesTheCpu) {
  MT_REQUIRE_GPU();
  const mt::MatmulPrecision saved = mt::get_float32_matmul_precision();
  mt::set_float32_matmul_precision(mt::MatmulPrecision::Highest);
  for (bool fused : {false, true}) {
    for (mt::amp::Precision precision :
         {mt::amp::Precision::Float32, mt::amp::Precision::BFloat16}) {
      const std::string what = std::string(fused ? "fused head" : "logits") +
                               (precision == mt::amp::Precision::Float32 ? " float32" : " bf16");
      const GptRun eager =
          train_gpt(12, false, false, fused, 0.0, {}, mt::testing::kGpu, precision);
      const GptRun graphed =
          train_gpt(12, true, false, fused, 0.0, {}, mt::testing::kGpu, precision);
      EXPECT_TRUE(graphed.summary.graph_fallback.empty())
          << what << ": " << graphed.summary.graph_fallback;
      ASSERT_TRUE(graphed.summary.graphed_steps.has_value()) << what;
      EXPECT_EQ(*graphed.summary.graphed_steps, 9) << what;
      EXPECT_EQ(graphed.params, eager.params) << what;
      if (precision != mt::amp::Precision::Float32) continue;
      const GptRun cpu = train_gpt(12, false, false, fused);
      ASSERT_EQ(graphed.params.size(), cpu.params.size());
      for (size_t i = 0; i < cpu.params.size(); ++i) {
        float a = 0, b = 0;
        std::memcpy(&a, &graphed.params[i], sizeof a);
        std::memcpy(&b, &cpu.params[i], sizeof b);
        EXPECT_NEAR(a, b, 1e-4 + 1e-3 * std::fabs(b)) << what << ", element " << i;
      }
    }
  }
  mt::set_float32_matmul_precision(saved);
}

}  // namespace
