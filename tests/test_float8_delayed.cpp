// Delayed float8 scaling (Transformer Engine's DelayedScaling) in float8_linear and
// nn::update_float8_scales: the update rule on chosen histories, what the forward and backward
// record, and a 3-layer MLP trained 20 steps against TE's rule written in PyTorch 2.15
// (tests/golden/float8_delayed.txt, by scripts/golden/make_float8_delayed.py: TE itself needs an
// FP8 GPU) — its losses, and each layer's scales and newest history rows after the last step.
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/saved_tensor_hooks.h"
#include "golden_file.h"
#include "nn/float8.h"
#include "nn/optim/sgd.h"
#include "runner/training/checkpoint.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Tensor;

namespace {

mt::Float8LinearConfig delayed(int64_t len = 4, mt::Float8AmaxAlgo algo = mt::Float8AmaxAlgo::Max,
                               double margin = 0) {
  mt::Float8LinearConfig c = mt::Float8LinearConfig::from_recipe("delayed");
  c.delayed = {len, algo, margin};
  return c;
}

Tensor floats(std::vector<float> v, mt::Shape shape) {
  return mt::from_vector(v, std::move(shape));
}

std::vector<float> values(const Tensor& t) { return t.to(mt::kFloat32).to_vector<float>(); }

// A Linear holding delayed state, as convert_to_float8_training leaves it.
mt::nn::Linear delayed_linear(int64_t in, int64_t out, const mt::Float8LinearConfig& c) {
  mt::nn::Linear l(in, out);
  EXPECT_EQ(mt::nn::convert_to_float8_training(*l, c).size(), 1u);
  return l;
}

TEST(Float8Delayed, RecipeIsTesHybridFormatWithItsDefaults) {
  const auto c = mt::Float8LinearConfig::from_recipe("delayed");
  EXPECT_TRUE(c.is_delayed());
  EXPECT_EQ(c.input, (mt::Float8Cast{mt::Float8Scaling::Delayed, mt::kFloat8E4M3FN}));
  EXPECT_EQ(c.weight_for_grad_input, c.input);
  EXPECT_EQ(c.grad_output, (mt::Float8Cast{mt::Float8Scaling::Delayed, mt::kFloat8E5M2}));
  EXPECT_EQ(c.delayed, (mt::Float8DelayedScaling{1024, mt::Float8AmaxAlgo::Max, 0.0}));
  auto l = delayed_linear(16, 32, c);
  EXPECT_EQ(l->float8_amax_history.shape(), mt::Shape({1024, 3}));
  EXPECT_TRUE(mt::equal(l->float8_scale, mt::ones({3})));
  EXPECT_EQ(values(mt::sum(l->float8_amax_history))[0], 0.0f);
}

TEST(Float8Delayed, UpdateFollowsTesRule) {
  auto l = delayed_linear(16, 16, delayed(3));
  // Rows: this step (row 0), then the older ones. Column 1 saw an inf, column 2 only zeros.
  l->float8_amax_history.copy_(floats({2, 8, 0, 4, INFINITY, 0, 1, 1, 0}, {3, 3}));
  l->float8_scale.copy_(floats({1, 0.5f, 3}, {3}));
  EXPECT_EQ(mt::nn::update_float8_scales(*l), 1);
  // max: 448 / 4 for the input; an inf amax and a zero amax keep their scales.
  EXPECT_EQ(values(l->float8_scale), (std::vector<float>{112, 0.5f, 3}));
  // Rolled by one (row i takes row i + 1, the last takes row 0), row 0 zeroed.
  EXPECT_EQ(values(l->float8_amax_history), (std::vector<float>{0, 0, 0, 1, 1, 0, 2, 8, 0}));

  // most_recent reads row 0 only; the margin halves each scale per unit; grad_output is e5m2.
  auto m = delayed_linear(16, 16, delayed(2, mt::Float8AmaxAlgo::MostRecent, 1));
  m->float8_amax_history.copy_(floats({7, 0.25f, 2, 100, 100, 100}, {2, 3}));
  mt::nn::update_float8_scales(*m);
  EXPECT_EQ(values(m->float8_scale), (std::vector<float>{224.0f / 7, 896, 14336}));
  EXPECT_EQ(values(m->float8_amax_history), (std::vector<float>{0, 0, 0, 7, 0.25f, 2}));

  // A quotient past float32's range becomes its largest value; a one-step history is zeroed.
  auto n = delayed_linear(16, 16, delayed(1));
  n->float8_amax_history.copy_(floats({1e-37f, 1, 1}, {1, 3}));
  mt::nn::update_float8_scales(*n);
  EXPECT_EQ(values(n->float8_scale)[0], std::numeric_limits<float>::max());
  EXPECT_EQ(values(n->float8_amax_history), (std::vector<float>{0, 0, 0}));
}

TEST(Float8Delayed, ForwardAndBackwardRecordTheirMaximaAndCastWithTheHeldScales) {
  const auto c = delayed(4);
  auto l = delayed_linear(16, 16, c);
  const Tensor x = mt::randn({8, 16}).requires_grad_();
  const Tensor gy = mt::randn({8, 16});
  const auto max_abs = [](const Tensor& t) { return values(mt::amax(mt::abs(t)))[0]; };
  // Two micro-batches: row 0 keeps the larger maximum of each tensor.
  mt::sum(l(x) * gy).backward();
  mt::sum(l(x * 3.0) * (gy * 0.5)).backward();
  const auto row0 = values(l->float8_amax_history.narrow(0, 0, 1));
  EXPECT_EQ(row0[0], 3 * max_abs(x));
  EXPECT_EQ(row0[1], max_abs(l->weight));
  EXPECT_EQ(row0[2], max_abs(gy));
  EXPECT_EQ(values(mt::sum(l->float8_amax_history.narrow(0, 1, 3)))[0], 0.0f);

  // The held scales are the ones used: the product is float8(x * s_x) @ float8(w * s_w)^T
  // / (s_x * s_w), saturating where x * s_x passes 448.
  l->float8_scale.copy_(floats({200, 64, 1}, {3}));
  mt::autograd::NoGradGuard no_grad;
  const Tensor sx = mt::full({}, 200.0f), sw = mt::full({}, 64.0f);
  const Tensor want =
      mt::scaled_mm(mt::float8_cast(x.detach(), sx, mt::kFloat8E4M3FN),
                    mt::float8_cast(l->weight.detach().t(), sw, mt::kFloat8E4M3FN),
                    mt::reciprocal(sx), mt::reciprocal(sw), Tensor(), mt::kFloat32) +
      l->bias.detach();
  EXPECT_TRUE(mt::equal(l(x), want));
}

TEST(Float8Delayed, ReduceCombinesEveryLayersMaximaBeforeTheUpdate) {
  mt::nn::Sequential net(mt::nn::Linear(16, 32), mt::nn::ReLU(), mt::nn::Linear(32, 16));
  ASSERT_EQ(mt::nn::convert_to_float8_training(*net, delayed(2)).size(), 2u);
  mt::sum(net(mt::randn({4, 16}))).backward();
  std::vector<mt::Shape> seen;
  // Another rank saw maxima of 448 (input, weight) and 57344 (grad_output): scales of 1.
  const auto reduce = [&](Tensor& amaxes) {
    seen.push_back(amaxes.shape());
    amaxes.copy_(mt::maximum(amaxes, floats({448, 448, 57344, 448, 448, 57344}, {2, 3})));
  };
  EXPECT_EQ(mt::nn::update_float8_scales(*net, reduce), 2);
  EXPECT_EQ(seen, (std::vector<mt::Shape>{{2, 3}}));
  for (const auto& [name, layer] : mt::nn::float8_delayed_layers(*net))
    EXPECT_EQ(values(layer->float8_scale), (std::vector<float>{1, 1, 1})) << name;
}

TEST(Float8Delayed, KeepsTheFloat8OperandsForBackward) {
  const auto c = delayed(4);
  const Tensor x = mt::randn({64, 128}).requires_grad_();
  const Tensor w = mt::randn({96, 128}).requires_grad_();
  const Tensor history = mt::zeros({4, 3}), scale = mt::ones({3});
  int64_t bytes = 0;
  {
    mt::autograd::SavedTensorHooksGuard guard([&](const Tensor& t) {
      bytes += t.nbytes();
      return std::shared_ptr<mt::autograd::PackedSaved>();
    });
    mt::float8_linear(x, w, Tensor(), c, history, scale);
  }
  EXPECT_EQ(bytes, (64 * 128 + 96 * 128) * 1 + 2 * 4);
}

TEST(Float8Delayed, RefusesMissingOrMisshapenState) {
  const Tensor x = mt::randn({4, 16}), w = mt::randn({16, 16});
  const auto c = delayed(4);
  const auto refuses = [](const std::function<void()>& f, const std::string& part) {
    try {
      f();
      ADD_FAILURE() << "no error, expected one with '" << part << "'";
    } catch (const mt::Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refuses([&] { mt::float8_linear(x, w, Tensor(), c); }, "needs the layer's amax_history [4, 3]");
  refuses(
      [&] {
        mt::float8_linear(x, w, Tensor(), c, mt::zeros({5, 3}), mt::ones({3}));
      },
      "expected amax_history of shape [4, 3]");
  refuses(
      [&] {
        mt::float8_linear(x, w, Tensor(), {}, mt::zeros({4, 3}), mt::ones({3}));
      },
      "delayed scaling's state");
  refuses(
      [&] {
        mt::float8_linear(x, w, Tensor(), c,
                          mt::zeros({4, 3}, mt::TensorOptions().dtype(mt::kBFloat16)),
                          mt::ones({3}));
      },
      "expected a float32 amax_history");
  refuses([&] { mt::float8_scale(x, mt::kFloat8E4M3FN, mt::Float8Scaling::Delayed); },
          "amax history");
  mt::Float8LinearConfig half = delayed(4);
  half.grad_output.scaling = half.grad_output_for_grad_weight.scaling =
      mt::Float8Scaling::Tensorwise;
  refuses([&] { half.validate("t"); }, "(4 of 6 casts are delayed)");
  refuses([&] { delayed(0).validate("t"); }, "at least 1 step, got 0");
  refuses([&] { delayed(4, mt::Float8AmaxAlgo::Max, -1).validate("t"); }, "margin in [0, 64]");
  refuses([&] { delayed(4, mt::Float8AmaxAlgo::Max, 150).validate("t"); }, "margin in [0, 64]");
  mt::nn::Linear stateless(16, 16);
  stateless->float8 = delayed(4);
  refuses([&] { mt::nn::update_float8_scales(*stateless); }, "no state");
}

TEST(Float8Stats, CastsCountWhatTheySaturatedAndFlushed) {
  auto l = delayed_linear(16, 16, delayed(4));
  mt::nn::track_float8_stats(*l);
  // Held scales of 1: an input of 16 values 0, 1, ..., 15 times 100 saturates the 11 past 464;
  // 1e-4 flushes (e4m3's smallest subnormal is 2^-9); a zero is neither.
  std::vector<float> row(16);
  for (int i = 0; i < 16; ++i) row[i] = 100.0f * static_cast<float>(i);
  row[0] = 0.0f;
  row[1] = 1e-4f;
  row[4] = 460.0f;  // above 448 but rounds to it: not a saturation
  const Tensor x = floats(row, {1, 16}).requires_grad_();
  {
    mt::autograd::NoGradGuard no_grad;
    l->weight.fill_(0.5);
  }
  mt::sum(l(x) * 1e-6).backward();  // a gradient of 1e-6 flushes in e5m2 at scale 1 (2^-16)
  mt::nn::update_float8_scales(*l);
  const auto stats = mt::nn::take_float8_stats(*l);
  ASSERT_EQ(stats.size(), 1u);
  const auto& [input, weight, grad] = stats[0].tensors;
  EXPECT_EQ(input.amax, 1500.0);
  EXPECT_EQ(input.saturated, 11);
  EXPECT_EQ(input.flushed, 1);
  EXPECT_EQ(weight.saturated + weight.flushed, 0);
  EXPECT_EQ(weight.amax, 0.5);
  EXPECT_EQ(grad.flushed, 16);
  EXPECT_EQ(input.scale, 448.0f / 1500.0f);  // the scale made for the next step
  // Taken: zeroed for the next interval.
  EXPECT_EQ(mt::nn::take_float8_stats(*l)[0].tensors[0].saturated, 0);
  // Dynamic scales never saturate; without tracking there is nothing to take.
  auto t = delayed_linear(16, 16, mt::Float8LinearConfig::from_recipe("tensorwise"));
  mt::nn::track_float8_stats(*t);
  t(x);
  EXPECT_EQ(mt::nn::take_float8_stats(*t)[0].tensors[0].saturated, 0);
  mt::nn::track_float8_stats(*t, false);
  EXPECT_TRUE(mt::nn::take_float8_stats(*t).empty());
}

TEST(Float8Stats, EvaluationLeavesTheHistoryAndStatsAlone) {
  auto l = delayed_linear(16, 16, delayed(4));
  mt::nn::track_float8_stats(*l);
  l->eval();
  const Tensor y = l(mt::randn({4, 16}) * 1000.0);
  EXPECT_EQ(values(mt::sum(l->float8_amax_history))[0], 0.0f);
  EXPECT_EQ(mt::nn::take_float8_stats(*l)[0].tensors[0].amax, 0.0);
  l->train();
  l(mt::randn({4, 16}));
  EXPECT_GT(values(mt::sum(l->float8_amax_history))[0], 0.0f);
}

TEST(Float8Stats, SaturationStartsPastTheLargestValuesRoundingRange) {
  const auto c = delayed(1);
  // Scales of 1: e4m3fn rounds 464 (a tie) to 448 and 465 past it; e5m2 rounds 61439 to 57344
  // and 61440 (its tie goes up) past it.
  const Tensor x = floats({464, 465, 1, 1}, {1, 4}).requires_grad_();
  const Tensor w = mt::full({16, 4}, 0.5);
  const Tensor stats = mt::zeros({3, 3}, mt::TensorOptions().dtype(mt::kFloat64));
  const Tensor y = mt::float8_linear(x, w, Tensor(), c, mt::zeros({1, 3}), mt::ones({3}), stats);
  std::vector<float> g(16, 1.0f);
  g[0] = 61439.0f;
  g[1] = 61440.0f;
  y.backward(floats(g, {1, 16}));
  const auto v = stats.to_vector<double>();
  EXPECT_EQ(v[1], 1.0) << "input saturated";
  EXPECT_EQ(v[3 * 2 + 1], 1.0) << "grad_output saturated";
  EXPECT_EQ(v[3 * 2 + 0], 61440.0) << "grad_output amax";
}

TEST(Float8Delayed, ACheckpointHoldsTheStateAndRefusesScalesNoWriterStores) {
  const std::string dir = ::testing::TempDir();
  auto saved = delayed_linear(16, 16, delayed(4));
  mt::sum(saved(mt::randn({4, 16}).requires_grad_())).backward();
  mt::nn::update_float8_scales(*saved);
  mt::runner::CheckpointParts parts;
  parts.model = saved.ptr().get();
  parts.rng = false;
  mt::runner::save_checkpoint(dir + "/f8.ckpt", parts);
  auto loaded = delayed_linear(16, 16, delayed(4));
  mt::runner::CheckpointParts into;
  into.model = loaded.ptr().get();
  into.rng = false;
  mt::runner::load_checkpoint(dir + "/f8.ckpt", into);
  EXPECT_TRUE(mt::equal(loaded->float8_scale, saved->float8_scale));
  EXPECT_TRUE(mt::equal(loaded->float8_amax_history, saved->float8_amax_history));
  // Another history length, or a layer without delayed scaling, is refused.
  auto longer = delayed_linear(16, 16, delayed(8));
  into.model = longer.ptr().get();
  EXPECT_THROW(mt::runner::load_checkpoint(dir + "/f8.ckpt", into), mt::Error);
  mt::nn::Linear plain(16, 16);
  into.model = plain.ptr().get();
  EXPECT_THROW(mt::runner::load_checkpoint(dir + "/f8.ckpt", into), mt::Error);
  // A scale of 0 would make every output NaN: refused before anything is restored.
  saved->float8_scale.fill_(0.0);
  mt::runner::save_checkpoint(dir + "/zero.ckpt", parts);
  into.model = loaded.ptr().get();
  try {
    mt::runner::load_checkpoint(dir + "/zero.ckpt", into);
    ADD_FAILURE() << "a zero scale was loaded";
  } catch (const mt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("float8 scale of layer '' is 0"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(mt::equal(loaded->float8_scale, saved->float8_scale));
}

// The MLP of make_float8_delayed.py, trained as it trains it.
struct DelayedRun {
  std::string name;
  mt::Float8LinearConfig config;
  bool bf16;
};

const std::map<std::string, mt::testing::GoldenCase>& golden() {
  static const auto cases = mt::testing::read_golden_file("float8_delayed.txt");
  return cases;
}

Tensor input(const std::string& name) {
  static const auto cases = mt::testing::read_golden_file("float8_linear.txt");
  return cases.at("inputs").tensors_by_name().at(name).to(mt::kFloat32);
}

class Float8DelayedMlp : public ::testing::TestWithParam<DelayedRun> {};

TEST_P(Float8DelayedMlp, LossesScalesAndHistoriesAreTesRule) {
  const DelayedRun run = GetParam();
  const auto want = golden().at("mlp_" + run.name).tensors_by_name();
  const auto losses = want.at("losses").to_vector<double>();
  mt::nn::Sequential net(mt::nn::Linear(32, 64), mt::nn::ReLU(), mt::nn::Linear(64, 64),
                         mt::nn::ReLU(), mt::nn::Linear(64, 16));
  std::vector<mt::nn::LinearImpl*> layers;
  for (size_t i : {0, 2, 4}) layers.push_back(&dynamic_cast<mt::nn::LinearImpl&>(*(*net)[i]));
  {
    mt::autograd::NoGradGuard no_grad;
    for (size_t i = 0; i < 3; ++i) {
      layers[i]->weight.copy_(input("mlp_w" + std::to_string(i + 1)));
      layers[i]->bias.copy_(input("mlp_b" + std::to_string(i + 1)));
    }
  }
  ASSERT_EQ(mt::nn::convert_to_float8_training(*net, run.config).size(), 3u);
  mt::optim::SGD opt(net->parameters(), 0.05, {.momentum = 0.9});
  const Tensor x = input("mlp_x"), target = input("mlp_y");
  for (size_t step = 0; step < losses.size(); ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      std::optional<mt::amp::autocast> scope;
      if (run.bf16) scope.emplace(mt::kCPU, mt::amp::Precision::BFloat16);
      loss = mt::mse_loss(net(x).to(mt::kFloat32), target);
    }
    loss.backward();
    opt.step();
    mt::nn::update_float8_scales(*net);
    // As for the torchao recipes (test_float8_linear): tight until the order of the float32 sums
    // moves a value across a float8 rounding boundary, looser after.
    const double rtol = step < 15 ? 1e-5 : 5e-4;
    EXPECT_NEAR(loss.item<float>(), losses[step], rtol * losses[step])
        << run.name << " step " << step;
  }
  // The input's maxima are the data's (exact); the rest come from the trained weights and
  // gradients, so they carry the trajectory's float32 differences.
  for (size_t i = 0; i < 3; ++i) {
    const auto scale = values(layers[i]->float8_scale);
    const auto want_scale = values(want.at("scale" + std::to_string(i)));
    const Tensor& h = layers[i]->float8_amax_history;
    const int64_t rows = want.at("history" + std::to_string(i)).size(0);
    const auto hist = values(h.narrow(0, h.size(0) - rows, rows));
    const auto want_hist = values(want.at("history" + std::to_string(i)));
    ASSERT_EQ(hist.size(), want_hist.size());
    for (size_t j = 0; j < 3; ++j)
      EXPECT_NEAR(scale[j], want_scale[j], 1e-3 * want_scale[j]) << run.name << " scale " << i;
    for (size_t j = 0; j < hist.size(); ++j)
      EXPECT_NEAR(hist[j], want_hist[j], 1e-3 * want_hist[j])
          << run.name << " layer " << i << " history element " << j;
  }
}

std::vector<DelayedRun> runs() {
  return {{"default_float32", delayed(1024), false},
          {"default_bfloat16", delayed(1024), true},
          {"short_float32", delayed(4, mt::Float8AmaxAlgo::MostRecent, 1), false}};
}

INSTANTIATE_TEST_SUITE_P(Recipes, Float8DelayedMlp, ::testing::ValuesIn(runs()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
