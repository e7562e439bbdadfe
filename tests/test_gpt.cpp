// nn::GPT: nanoGPT's names, tying and initialisation; generation with and without the key/value
// cache; and a 40-step AdamW training run against PyTorch (tests/golden/gpt_trajectory.txt,
// written by scripts/golden/make_gpt_trajectory.py), in float32 and under bf16 autocast, and 20
// steps of it in float8 against torchao (tests/golden/float8_gpt.txt).
#include <algorithm>
#include <cmath>
#include <map>

#include "amp/autocast.h"
#include "engine/cpu_matmul_paths.h"
#include "golden_file.h"
#include "nn/float8.h"
#include "nn/functional.h"
#include "nn/optim/adam.h"
#include "nn/transformer.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Shape;
using mt::Tensor;

namespace {

mt::nn::GPTConfig tiny(bool bias = true) {
  mt::nn::GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 20;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.bias = bias;
  return c;
}

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, _] : named) out.push_back(n);
  return out;
}

Tensor tokens(std::vector<int64_t> v, Shape shape) { return mt::from_vector(v, shape); }

}  // namespace

TEST(GPT, ParameterNamesAreNanoGPTs) {
  mt::nn::GPT model(tiny());
  const std::vector<std::string> block = {
      "ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
      "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
      "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};
  std::vector<std::string> want = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i)
    for (const auto& b : block) want.push_back("transformer.h." + std::to_string(i) + "." + b);
  want.push_back("transformer.ln_f.weight");
  want.push_back("transformer.ln_f.bias");
  // The tied weight once, as PyTorch's named_parameters...
  EXPECT_EQ(names(model->named_parameters()), want);
  // ...and under both keys in the state dict, as nanoGPT's.
  want.push_back("lm_head.weight");
  EXPECT_EQ(model->state_dict().keys(), want);
  const auto sd = model->state_dict();
  EXPECT_EQ(sd.at("lm_head.weight").data_ptr(), sd.at("transformer.wte.weight").data_ptr());
  EXPECT_EQ(model->lm_head->weight.data_ptr(), model->wte->weight.data_ptr());
}

TEST(GPT, WithoutBiasHasNoBiases) {
  mt::nn::GPT model(tiny(/*bias=*/false));
  for (const auto& [n, p] : model->named_parameters())
    EXPECT_EQ(n.find("bias"), std::string::npos) << n;
  EXPECT_EQ(model->named_parameters().size(), 2u + 2u * 6u + 1u);
}

TEST(GPT, InitialisationIsNanoGPTs) {
  mt::nn::GPTConfig c;
  c.block_size = 64;
  c.vocab_size = 256;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_embd = 64;
  mt::manual_seed(0);
  mt::nn::GPT model(c);
  auto stddev = [](const Tensor& t) { return mt::std(t.detach()).item<float>(); };
  for (const auto& [n, p] : model->named_parameters()) {
    SCOPED_TRACE(n);
    const bool proj = n.ends_with("c_proj.weight");
    if (n.ends_with(".bias")) {
      EXPECT_EQ(mt::abs(p).sum().item<float>(), 0.0f);
    } else if (n.find("ln_") != std::string::npos) {
      EXPECT_TRUE(mt::equal(p, mt::ones(p.shape())));
    } else {
      const double want = proj ? 0.02 / std::sqrt(8.0) : 0.02;
      EXPECT_NEAR(stddev(p), want, 0.1 * want);
      EXPECT_NEAR(mt::mean(p.detach()).item<float>(), 0.0, 0.1 * want);
    }
  }
}

TEST(GPT, ForwardShapesAndErrors) {
  mt::manual_seed(1);
  mt::nn::GPT model(tiny());
  const Tensor idx = mt::randint(0, 20, {3, 5});
  EXPECT_EQ(model(idx).shape(), (Shape{3, 5, 20}));
  mt::testing::expect_error(
      [&] {
        model(mt::randint(0, 20, {1, 9}));
      },
      {"GPT", "length 9", "block size is only 8"});
  mt::testing::expect_error([&] { model(mt::randn({1, 4})); }, {"GPT", "int64", "[1, 4]"});
  mt::nn::GPTConfig bad = tiny();
  bad.n_head = 3;
  mt::testing::expect_error([&] { mt::nn::GPT{bad}; }, {"n_embd (8)", "n_head (3)"});
}

TEST(GPT, CausalPositionsDoNotSeeTheFuture) {
  mt::manual_seed(2);
  mt::nn::GPT model(tiny());
  model->eval();
  const Tensor a = tokens({1, 2, 3, 4, 5, 6}, Shape{1, 6});
  const Tensor b = tokens({1, 2, 3, 9, 9, 9}, Shape{1, 6});
  const Tensor la = model(a), lb = model(b);
  EXPECT_TRUE(mt::equal(la.narrow(1, 0, 3), lb.narrow(1, 0, 3)));
  EXPECT_FALSE(mt::equal(la.narrow(1, 3, 1), lb.narrow(1, 3, 1)));
}

TEST(GPT, DropoutOnlyInTraining) {
  mt::nn::GPTConfig c = tiny();
  c.dropout = 0.5;
  mt::manual_seed(8);
  mt::nn::GPT model(c);
  const Tensor idx = mt::randint(0, 20, {2, 6});
  EXPECT_FALSE(mt::equal(model(idx), model(idx)));
  model->eval();
  EXPECT_TRUE(mt::equal(model(idx), model(idx)));
  // Each block's attention weights are dropped too, not only the residual branches.
  auto attn = model->h->at<mt::nn::TransformerBlockImpl>(0)->attn;
  attn->train();
  attn->resid_dropout->eval();
  const Tensor x = mt::randn({1, 6, 8});
  EXPECT_FALSE(mt::equal(attn(x), attn(x)));
}

TEST(GPT, CountsParametersAndFlopsAsNanoGPT) {
  mt::nn::GPTConfig c = tiny();
  mt::nn::GPT model(c);
  const int64_t C = c.n_embd, V = c.vocab_size, L = c.n_layer, Tb = c.block_size;
  const int64_t per_block =
      2 * 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + (C * 4 * C + 4 * C) + (4 * C * C + C);
  const int64_t all = V * C + Tb * C + L * per_block + 2 * C;
  EXPECT_EQ(model->num_parameters(/*non_embedding=*/false), all);
  EXPECT_EQ(model->num_parameters(), all - Tb * C);
  EXPECT_DOUBLE_EQ(model->flops_per_token(), 6.0 * static_cast<double>(all - Tb * C) +
                                                 12.0 * L * c.n_head * (C / c.n_head) * Tb);
}

TEST(GPT, OptimizerGroupsDecayMatricesOnly) {
  mt::nn::GPT model(tiny());
  const auto groups = model->optimizer_groups(0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].get("weight_decay"), 0.1);
  EXPECT_EQ(groups[1].get("weight_decay"), 0.0);
  for (const Tensor& p : groups[0].params) EXPECT_GE(p.dim(), 2);
  for (const Tensor& p : groups[1].params) EXPECT_EQ(p.dim(), 1);
  EXPECT_EQ(groups[0].params.size() + groups[1].params.size(), model->parameters().size());
}

// ---- generation ---------------------------------------------------------------------------

TEST(GPTGenerate, SameSeedSameTokens) {
  mt::manual_seed(3);
  mt::nn::GPT model(tiny());
  model->eval();
  const Tensor prompt = tokens({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor a = model->generate(prompt, 10, 1.0, std::nullopt, 42);
  const Tensor b = model->generate(prompt, 10, 1.0, std::nullopt, 42);
  const Tensor c = model->generate(prompt, 10, 1.0, std::nullopt, 43);
  EXPECT_EQ(a.shape(), (Shape{2, 13}));
  EXPECT_TRUE(mt::equal(a.narrow(1, 0, 3), prompt));
  EXPECT_TRUE(mt::equal(a, b));
  EXPECT_FALSE(mt::equal(a, c));
  // A Generator continues its stream across calls.
  mt::Generator g1(42), g2(42);
  const Tensor first = model->generate(prompt, 4, 1.0, std::nullopt, g1);
  EXPECT_TRUE(mt::equal(first, model->generate(prompt, 4, 1.0, std::nullopt, g2)));
  EXPECT_FALSE(mt::equal(model->generate(prompt, 4, 1.0, std::nullopt, g1), first));
}

// Runs past block_size (8) so the cached path has to crop and recompute, as the full one does.
TEST(GPTGenerate, KVCacheGivesTheTokensOfFullRecompute) {
  mt::manual_seed(4);
  mt::nn::GPT model(tiny());
  model->eval();
  const Tensor prompt = tokens({7, 1, 3, 0, 2, 5}, Shape{2, 3});
  for (std::optional<int64_t> k : {std::optional<int64_t>(), std::optional<int64_t>(5)}) {
    for (double temperature : {1.0, 0.7}) {
      const Tensor cached = model->generate(prompt, 14, temperature, k, 11, true);
      const Tensor full = model->generate(prompt, 14, temperature, k, 11, false);
      EXPECT_TRUE(mt::equal(cached, full)) << "top_k " << k.value_or(0) << " T " << temperature;
    }
  }
}

TEST(GPTGenerate, CachedLogitsMatchTheFullForward) {
  mt::manual_seed(5);
  mt::nn::GPT model(tiny());
  model->eval();
  mt::autograd::NoGradGuard no_grad;
  const Tensor seq = mt::randint(0, 20, {2, 7});
  const Tensor full = model(seq);
  std::vector<mt::nn::KVCacheEntry> cache;
  model->forward(seq.narrow(1, 0, 3), cache);
  const Tensor two = model->forward(seq.narrow(1, 3, 2), cache);  // a multi-position step
  EXPECT_EQ(cache[0].length(), 5);
  mt::testing::expect_close(two, full.narrow(1, 3, 2), 1e-5, 1e-6);
  for (int64_t t = 5; t < 7; ++t) {
    const Tensor one = model->forward(seq.narrow(1, t, 1), cache);
    mt::testing::expect_close(one, full.narrow(1, t, 1), 1e-5, 1e-6);
  }
  mt::testing::expect_error([&] { model->forward(seq.narrow(1, 0, 2), cache); },
                            {"length 9", "7 cached", "block size is only 8"});
}

TEST(GPTGenerate, LowTemperatureIsArgmax) {
  mt::manual_seed(6);
  mt::nn::GPT model(tiny());
  model->eval();
  const Tensor prompt = tokens({3, 9}, Shape{1, 2});
  Tensor greedy = prompt;
  {
    mt::autograd::NoGradGuard no_grad;
    for (int i = 0; i < 6; ++i) {
      const Tensor logits = model(greedy).select(1, greedy.size(1) - 1);
      greedy = mt::cat({greedy, mt::argmax(logits, 1, true)}, 1);
    }
  }
  for (uint64_t seed : {0, 1, 2})
    EXPECT_TRUE(mt::equal(model->generate(prompt, 6, 1e-6, {}, seed), greedy));
  // top_k = 1 is argmax at any temperature.
  EXPECT_TRUE(mt::equal(model->generate(prompt, 6, 5.0, 1, 9), greedy));
}

TEST(GPTGenerate, TopKKeepsTheKMostLikely) {
  mt::manual_seed(7);
  mt::nn::GPT model(tiny());
  model->eval();
  const Tensor prompt = tokens({4}, Shape{1, 1});
  Tensor logits;
  {
    mt::autograd::NoGradGuard no_grad;
    logits = model(prompt).select(1, 0);
  }
  const Tensor top3 = mt::topk(logits, 3, 1).indices;
  std::map<int64_t, int> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const int64_t tok = model->generate(prompt, 1, 3.0, 3, seed).select(1, 1).item<int64_t>();
    ++seen[tok];
  }
  EXPECT_EQ(seen.size(), 3u);
  for (const auto& [tok, n] : seen)
    EXPECT_TRUE(mt::eq(top3, mt::scalar_tensor(tok, mt::kInt64)).any().item<bool>()) << tok;
}

TEST(GPTGenerate, RejectsBadArguments) {
  mt::nn::GPT model(tiny());
  const Tensor prompt = tokens({1}, Shape{1, 1});
  mt::testing::expect_error([&] { model->generate(prompt, 1, 0.0); }, {"temperature", "0"});
  mt::testing::expect_error([&] { model->generate(prompt, 1, 1.0, 0); }, {"top_k"});
  mt::testing::expect_error([&] { model->generate(mt::randn({1, 2}), 1); }, {"int64"});
}

// On a GPU: the CPU's logits (float32, within GEMM reassociation) and its tokens, with and without
// the cache; and under bf16 autocast the CPU's bf16 forward and backward within their bf16 error.
TEST(GPTCuda, MatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(9);
  mt::nn::GPT cpu(tiny());
  mt::nn::GPT gpu(tiny());
  gpu->load_state_dict(cpu->state_dict());
  gpu->to(mt::testing::kGpu);
  cpu->eval();
  gpu->eval();
  const Tensor idx = mt::randint(0, 20, {2, 8});
  {
    mt::autograd::NoGradGuard no_grad;
    mt::testing::expect_close(gpu(idx.to(mt::testing::kGpu)).cpu(), cpu(idx), 1e-4, 1e-5);
  }
  const Tensor prompt = idx.narrow(1, 0, 2);
  const Tensor want = cpu->generate(prompt, 10, 1e-6, {}, 3);
  for (bool cache : {true, false}) {
    EXPECT_TRUE(
        mt::equal(gpu->generate(prompt.to(mt::testing::kGpu), 10, 1e-6, {}, 3, cache).cpu(), want));
  }

  // bf16: both devices round the same products to bfloat16 and accumulate in float32, in
  // different orders, so a value near a rounding boundary may land on the other neighbour. Each
  // device's bf16 result lies within the bf16 error E of the float32 result, which the CPU
  // measures (E = the largest |bf16 - float32| on the CPU, per tensor); by the triangle
  // inequality the two bf16 results then lie within 2E of each other, and 3E allows the GPU's
  // own error to exceed the CPU's by half.
  cpu->train();
  gpu->train();
  const Tensor targets = mt::randint(0, 20, {2 * 8});
  struct Result {
    std::vector<Tensor> values;  // the logits, then every parameter's gradient
  };
  auto run = [&](mt::nn::GPT& m, mt::Device d, bool bf16) {
    m->zero_grad();
    Tensor logits;
    {
      mt::amp::autocast scope(d, mt::amp::Precision(mt::kBFloat16), bf16);
      logits = m(idx.to(d));
    }
    mt::nn::functional::cross_entropy(logits.view({-1, 20}).to(mt::kFloat32), targets.to(d))
        .backward();
    Result r;
    r.values.push_back(logits.detach().to(mt::kFloat32).cpu());
    for (const Tensor& p : m->parameters()) r.values.push_back(p.grad().to(mt::kFloat32).cpu());
    return r;
  };
  const Result f32 = run(cpu, mt::Device::cpu(), false);
  const Result cpu_bf16 = run(cpu, mt::Device::cpu(), true);
  const Result got = run(gpu, mt::testing::kGpu, true);
  ASSERT_EQ(got.values.size(), cpu_bf16.values.size());
  for (size_t k = 0; k < cpu_bf16.values.size(); ++k) {
    const double e = mt::amax(mt::abs(cpu_bf16.values[k] - f32.values[k])).item<double>();
    const double d = mt::amax(mt::abs(got.values[k] - cpu_bf16.values[k])).item<double>();
    // A tensor bf16 leaves exact (E = 0) must come out exact on the GPU as well, up to float32
    // reassociation of its sums.
    const double floor = 1e-6 * std::max(1.0, mt::amax(mt::abs(f32.values[k])).item<double>());
    EXPECT_LE(d, 3 * e + floor) << (k == 0 ? std::string("logits")
                                           : "gradient " + std::to_string(k - 1))
                                << ": GPU-CPU " << d << ", CPU bf16 error " << e;
  }
}

// ---- the golden trajectory ----------------------------------------------------------------

namespace {

struct Trajectory {
  std::map<std::string, std::string> options;
  std::map<std::string, Tensor> tensors;
  std::vector<double> losses;
};

Trajectory load_trajectory() {
  mt::testing::GoldenFormat format;
  format.case_kind = "run";
  format.value_kinds = {"losses"};
  Trajectory t;
  const auto cases = mt::testing::read_golden_file("gpt_trajectory.txt", format);
  EXPECT_EQ(cases.size(), 1u);
  if (cases.empty()) return t;
  const auto& c = cases.begin()->second;
  for (const std::string& kv : c.header) {
    const auto eq = kv.find('=');
    t.options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& g : c.tensors) t.tensors[g.name] = g.f64();
  t.losses = c.first("losses");
  return t;
}

// The run of make_gpt_trajectory.py: the losses before each step, under `precision`.
std::vector<double> train(const Trajectory& t, std::optional<mt::DType> precision,
                          const std::string& float8_recipe = "", int max_steps = -1,
                          std::map<std::string, Tensor>* first_grads = nullptr) {
  auto opt = [&](const char* k) { return std::stod(t.options.at(k)); };
  mt::nn::GPTConfig c;
  c.block_size = static_cast<int64_t>(opt("block_size"));
  c.vocab_size = static_cast<int64_t>(opt("vocab_size"));
  c.n_layer = static_cast<int64_t>(opt("n_layer"));
  c.n_head = static_cast<int64_t>(opt("n_head"));
  c.n_embd = static_cast<int64_t>(opt("n_embd"));
  c.dropout = opt("dropout");
  c.bias = opt("bias") != 0;
  mt::nn::GPT model(c);
  mt::nn::StateDict init;
  for (const auto& [name, p] : model->named_parameters()) {
    init.insert(name, t.tensors.at("param:" + name).to(mt::kFloat32));
  }
  init.insert("lm_head.weight", t.tensors.at("param:transformer.wte.weight").to(mt::kFloat32));
  model->load_state_dict(init);
  if (!float8_recipe.empty()) {
    const auto layers = mt::nn::convert_to_float8_training(
        *model, mt::Float8LinearConfig::from_recipe(float8_recipe));
    EXPECT_EQ(layers.size(), static_cast<size_t>(4 * c.n_layer));  // the blocks', not lm_head
  }
  mt::optim::AdamWOptions o;
  o.lr = opt("lr");
  o.betas = {0.9, 0.95};
  mt::optim::AdamW optimizer(model->optimizer_groups(opt("weight_decay")), o);
  const int steps = max_steps >= 0 ? max_steps : static_cast<int>(opt("steps"));
  int batches = 0;
  while (t.tensors.count("x:" + std::to_string(batches))) ++batches;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = t.tensors.at("x:" + std::to_string(step % batches)).to(mt::kInt64);
    const Tensor y = t.tensors.at("y:" + std::to_string(step % batches)).to(mt::kInt64);
    Tensor loss;
    {
      std::optional<mt::amp::autocast> scope;
      if (precision) scope.emplace(mt::DeviceType::CPU, mt::amp::Precision(*precision));
      const Tensor logits = model(x);
      loss = mt::cross_entropy(logits.view({-1, c.vocab_size}), y.reshape({-1}));
    }
    optimizer.zero_grad();
    loss.backward();
    if (step == 0 && first_grads != nullptr)
      for (const auto& [name, p] : model->named_parameters())
        (*first_grads)[name] = p.grad().clone();
    optimizer.step();
    losses.push_back(loss.to(mt::kFloat64).item<double>());
  }
  return losses;
}

}  // namespace

TEST(GPTGolden, Float32FollowsPyTorch) {
  const Trajectory t = load_trajectory();
  ASSERT_EQ(t.losses.size(), 40u);
  const std::vector<double> got = train(t, std::nullopt);
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], t.losses[i], 1e-5 * std::abs(t.losses[i])) << "step " << i;
  }
  EXPECT_LT(got.back(), 0.7 * got.front());  // it learns
}

// bf16 keeps 8 significant bits, so one rounding moves a value by up to 2^-9 relative and the
// bf16 tolerance of a single value is 2^-8. Under autocast every matmul rounds its inputs to bf16,
// but the loss is computed in float32 (cross_entropy and softmax run in float32) as a mean over
// 64 tokens, whose independent rounding errors largely cancel: the loss stays well within 2^-8 of
// the float32 curve at every step (about 3e-4 here). The curve falls by 40% over the run, so a
// bf16 run that stops learning or diverges leaves the band within a few steps.
TEST(GPTGolden, BFloat16AutocastStaysNearFloat32) {
  const Trajectory t = load_trajectory();
  ASSERT_EQ(t.losses.size(), 40u);
  const std::vector<double> got = train(t, mt::kBFloat16);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double rel = std::abs(got[i] - t.losses[i]) / t.losses[i];
    worst = std::max(worst, rel);
    EXPECT_LT(rel, std::ldexp(1.0, -8))
        << "step " << i << ": bf16 " << got[i] << ", float32 " << t.losses[i];
  }
  // Not float32 in disguise: autocast did lower the matmuls.
  EXPECT_GT(worst, 1e-5);
}

// The same bf16 run on the CPU's bf16 instructions (tests/test_cpu_gemm_paths.cpp has the
// op-level bound) against the emulation. Both are bf16 runs that differ only in the float32
// summation order inside each product; that decides which way some values round to bf16, so the
// two drift apart by rounding-sized steps, never more than the bf16 band around float32 (2^-8,
// above), at any step.
TEST(GPTGolden, BFloat16InstructionsFollowTheEmulation) {
  if (mt::cpu::cpu_bf16_matmul_isa_available() == mt::cpu::Bf16MatmulIsa::Emulated)
    GTEST_SKIP() << "this CPU has no bf16 instructions oneDNN runs: only the emulation exists";
  const Trajectory t = load_trajectory();
  const bool saved = mt::cpu::cpu_bf16_matmul_emulation();
  mt::cpu::set_cpu_bf16_matmul_emulation(true);
  const std::vector<double> emulated = train(t, mt::kBFloat16);
  mt::cpu::set_cpu_bf16_matmul_emulation(false);
  mt::reset_fast_path_stats();
  const std::vector<double> hardware = train(t, mt::kBFloat16);
  const auto stats = mt::testing::cpu_matmul_counts();
  mt::cpu::set_cpu_bf16_matmul_emulation(saved);
  EXPECT_GT(stats.bf16_hardware, 40 * 10);  // the step's products ran on the instructions
  EXPECT_EQ(stats.bf16_fallbacks, 0);
  for (size_t i = 0; i < hardware.size(); ++i) {
    EXPECT_LT(std::abs(hardware[i] - emulated[i]) / emulated[i], std::ldexp(1.0, -8))
        << "step " << i << ": instructions " << hardware[i] << ", emulated " << emulated[i];
    EXPECT_LT(std::abs(hardware[i] - t.losses[i]) / t.losses[i], std::ldexp(1.0, -8))
        << "step " << i << ": instructions " << hardware[i] << ", float32 " << t.losses[i];
  }
}

// ---- float8 training against torchao ---------------------------------------------------------

// The run above for 20 steps with the Linear layers of its blocks in float8, against torchao 0.18
// on PyTorch 2.15 (tests/golden/float8_gpt.txt, written by scripts/golden/make_float8_gpt.py from
// the same weights and batches), for each torchao recipe in float32 and under bfloat16 autocast,
// and the same run without float8 ("none") under autocast as the floor.
//
// Tolerances, from what decides them (measured on a Zen 4; tests/test_float8_linear.cpp bounds
// one layer's products):
// - float32, first steps: the products of float8 values are exact in float32, so the two differ
//   only in the order of float32 sums: the first steps' losses agree to 1.2e-7 relative and the
//   first step's weight gradients to 5e-7 of their row's largest value, except where a sum that
//   lands next to a float8 rounding boundary casts the other way (e5m2 grad_output, 2 significant
//   bits: one such value moves a whole row of a weight gradient, by up to 4e-4 of the row; 1% of
//   the elements here, 5% allowed).
//   Float8 itself moves the first loss by 1e-4 and the gradients by 1-3% (median) from float32.
// - every step: such flips are amplified by training. mantissa against itself, only the bf16
//   GEMMs' summation order changed (instructions against emulation), drifts by up to 3.5e-4 by
//   step 20, as far as it drifts from torchao; that is the band, at 1e-3.
// - bfloat16: mantissa's bf16 autocast and PyTorch's CPU autocast round the rest of the model
//   (attention, GELU, their backward) in different places: without float8 their first losses
//   differ by 8e-6 and the run by up to 1.1e-4. An e5m2 cast turns such bf16 differences into
//   flips, so gradients are compared in float32 only; the losses within 2.5e-5 at the first step
//   (rowwise is 3.2e-5 from no float8 there) and 2e-3 after (measured: 1.2e-5 and 9.7e-4).
class GPTFloat8Golden : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(GPTFloat8Golden, LossesAreTorchaos) {
  const auto& [recipe, precision] = GetParam();
  const std::string name = "gpt_" + recipe + "_" + precision;
  static const auto cases = mt::testing::read_golden_file("float8_gpt.txt");
  const auto want_case = cases.at(name).tensors_by_name();
  const auto want = want_case.at("losses").to_vector<double>();
  ASSERT_EQ(want.size(), 20u);
  const bool bf16 = precision == "bfloat16";
  std::map<std::string, Tensor> grads;
  const std::vector<double> got =
      train(load_trajectory(), bf16 ? std::optional(mt::kBFloat16) : std::nullopt,
            recipe == "none" ? "" : recipe, static_cast<int>(want.size()), &grads);
  for (size_t i = 0; i < got.size(); ++i) {
    const double rtol = bf16 ? (i == 0 ? 2.5e-5 : 2e-3) : (i < 4 ? 1e-5 : 1e-3);
    EXPECT_NEAR(got[i], want[i], rtol * want[i]) << name << " step " << i;
  }
  int compared = 0;
  for (const auto& [key, g] : want_case) {
    if (key.rfind("grad:", 0) != 0) continue;
    ++compared;
    const auto e = g.to(mt::kFloat64).to_vector<double>();
    const auto a = grads.at(key.substr(5)).to(mt::kFloat64).to_vector<double>();
    const int64_t cols = g.size(-1);
    size_t flips = 0;
    for (size_t r = 0; r * cols < e.size(); ++r) {
      double row_max = 0;
      for (int64_t j = 0; j < cols; ++j) row_max = std::max(row_max, std::fabs(e[r * cols + j]));
      for (int64_t j = 0; j < cols; ++j) {
        const double err = std::fabs(a[r * cols + j] - e[r * cols + j]);
        if (err > 2e-6 * row_max) ++flips;
        EXPECT_LE(err, 2e-3 * row_max) << name << " " << key << " element " << r * cols + j;
      }
    }
    EXPECT_LE(flips, e.size() / 20) << name << " " << key << ": elements a float8 rounding away";
  }
  EXPECT_EQ(compared, bf16 ? 0 : 2);
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, GPTFloat8Golden,
    ::testing::Combine(::testing::Values("tensorwise", "rowwise", "rowwise_with_gw_hp", "none"),
                       ::testing::Values("float32", "bfloat16")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });
