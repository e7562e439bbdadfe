// mantissa's benchmarks (Google Benchmark): the workloads of bench/workloads.h in float32 and in
// emulated bfloat16/float16 autocast, on the CPU and, when present, on cuda:0. bench/run.sh runs
// one benchmark per process (so that peak RSS belongs to one workload), interleaved with the
// peers, and builds the table; running this binary by hand works too.
//
// Names are "<workload>/<device>/<precision>" (precision float8_<recipe>: the MLP's or the GPT's
// Linear layers in float8 under bfloat16 autocast). Counters: samples_per_s, gflops (matmul FLOPs
// per second; for the GPT workloads tokens_per_s and gflops from nanoGPT's FLOPs per token),
// peak_rss_mib (process high-water mark) and base_rss_mib (the mark before any benchmark ran: the
// library and the runtime, not the workload).
#include <benchmark/benchmark.h>
#include <mantissa.h>
#include <sys/resource.h>

#include <memory>
#include <string>

#include "engine/cpu_matmul_paths.h"
#include "runner/training/trainer.h"
#include "workloads.h"

namespace mt = mantissa;
using mantissa_bench::Workload;

namespace {

double max_rss_mib() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

double g_base_rss_mib = 0;

// Linear layers with ReLU between them, each Linear -> ReLU -> Linear pair built as one FusedMLP
// (the fused op is asked for by name, as a user would). The layers are created in order either
// way, so a seed gives the weights of the plain Linear/ReLU chain.
std::shared_ptr<mt::nn::SequentialImpl> make_mlp(const Workload& w, mt::Device device) {
  auto model = std::make_shared<mt::nn::SequentialImpl>();
  const size_t n = w.layers.size();
  size_t i = 0;
  for (; i + 2 < n; i += 2) {
    if (i > 0) model->push_back(mt::nn::ReLU());
    model->push_back(mt::nn::FusedMLP(w.layers[i], w.layers[i + 1], w.layers[i + 2]));
  }
  if (i + 1 < n) {
    if (i > 0) model->push_back(mt::nn::ReLU());
    model->push_back(mt::nn::Linear(w.layers[i], w.layers[i + 1]));
  }
  model->to(device);
  return model;
}

void sync(mt::Device device) {
  // A one-element copy to the host waits for the device (and is free on the CPU).
  if (device.is_cuda()) (void)mt::zeros({1}, device).item<float>();
}

// Waits for the device after the last timed step, inside the timed loop (the timer stops when the
// loop ends), so that queued GPU work is counted without a sync per step.
void sync_after_last(benchmark::State& state, int64_t& done, mt::Device device) {
  if (++done == state.max_iterations) sync(device);
}

void finish(benchmark::State& state, const Workload& w, mt::Device device) {
  const double iters = double(state.iterations());
  if (w.name != "add") {
    state.counters["samples_per_s"] =
        benchmark::Counter(iters * double(w.batch), benchmark::Counter::kIsRate);
  }
  state.counters["gflops"] =
      benchmark::Counter(iters * mantissa_bench::step_flops(w) / 1e9, benchmark::Counter::kIsRate);
  state.counters["peak_rss_mib"] = max_rss_mib();
  state.counters["base_rss_mib"] = g_base_rss_mib;
}

void bench_add(benchmark::State& state, const Workload& w, mt::Device device, mt::DType dtype) {
  mt::manual_seed(0);
  auto a = mt::randn({w.batch}, mt::TensorOptions(device).dtype(dtype));
  auto b = mt::randn({w.batch}, mt::TensorOptions(device).dtype(dtype));
  int64_t done = 0;
  for (auto _ : state) {
    auto c = a + b;
    benchmark::DoNotOptimize(c.unsafe_impl());
    sync_after_last(state, done, device);
  }
  finish(state, w, device);
}

void bench_linear_fb(benchmark::State& state, const Workload& w, mt::Device device,
                     std::optional<mt::amp::Precision> precision) {
  mt::manual_seed(0);
  mt::nn::Linear linear(w.layers[0], w.layers[1]);
  linear->to(device);
  auto x = mt::randn({w.batch, w.layers[0]}, device);
  const auto params = linear->parameters();
  int64_t done = 0;
  for (auto _ : state) {
    for (const auto& p : params) p.set_grad(mt::Tensor());
    mt::Tensor loss;
    {
      mt::amp::autocast scope(device, precision, precision.has_value());
      loss = linear(x).sum();
    }
    loss.backward();
    sync_after_last(state, done, device);
  }
  finish(state, w, device);
}

// The ToyModel as users write it (README): a custom module, net2(relu(net1(x))), unfused.
struct ToyModel : mt::nn::Module {
  mt::nn::Linear net1{nullptr}, net2{nullptr};
  ToyModel(int64_t in, int64_t hidden, int64_t out) {
    net1 = register_module("net1", mt::nn::Linear(in, hidden));
    net2 = register_module("net2", mt::nn::Linear(hidden, out));
  }
  mt::Tensor forward(const mt::Tensor& x) { return net2(mt::relu(net1(x))); }
};

// A workload's model: the ToyModel module for "toy", make_mlp's Sequential for the others.
struct Model {
  std::shared_ptr<ToyModel> toy;
  std::shared_ptr<mt::nn::SequentialImpl> mlp;
  std::vector<mt::Tensor> parameters() const { return toy ? toy->parameters() : mlp->parameters(); }
  mt::Tensor forward(const mt::Tensor& x) const { return toy ? toy->forward(x) : mlp->forward(x); }
};

// The workload's model after seeding the generator, so every run starts from the same weights
// and data (the members below draw x and target right after it).
Model seeded_model(const Workload& w, mt::Device device) {
  mt::manual_seed(0);
  Model m;
  if (w.name == "toy") {
    m.toy = std::make_shared<ToyModel>(w.layers[0], w.layers[1], w.layers[2]);
    m.toy->to(device);
  } else {
    m.mlp = make_mlp(w, device);
  }
  return m;
}

// One training workload's model, data, loss and optimizer (initialised in this order);
// step() is the timed training step.
struct TrainingRun {
  TrainingRun(const Workload& w, mt::Device dev, const char* float8_recipe = nullptr)
      : device(dev),
        model(seeded_model(w, dev)),
        x(mt::randn({w.batch, w.layers.front()}, dev)),
        target(mt::randn({w.batch, w.layers.back()}, dev)),
        optimizer(model.parameters(), w.lr, {.momentum = w.momentum}) {
    if (float8_recipe != nullptr)
      mt::nn::convert_to_float8_training(*model.mlp,
                                         mt::Float8LinearConfig::from_recipe(float8_recipe));
    delayed_float8 = !mt::nn::float8_delayed_layers(*model.mlp).empty();
  }

  void step(std::optional<mt::amp::Precision> precision) {
    optimizer.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::autocast scope(device, precision, precision.has_value());
      loss = loss_fn(model.forward(x), target);
    }
    loss.backward();
    optimizer.step();
    // Delayed scaling's update, as the Trainer makes it: only where a layer has delayed scaling,
    // so the other rows' steps do not walk the model.
    if (delayed_float8) mt::nn::update_float8_scales(*model.mlp);
  }

  mt::Device device;
  bool delayed_float8 = false;
  Model model;
  mt::Tensor x, target;
  mt::nn::MSELoss loss_fn;
  mt::optim::SGD optimizer;
};

void bench_train(benchmark::State& state, const Workload& w, mt::Device device,
                 std::optional<mt::amp::Precision> precision, const char* float8_recipe = nullptr) {
  TrainingRun run(w, device, float8_recipe);
  int64_t done = 0;
  for (auto _ : state) {
    run.step(precision);
    sync_after_last(state, done, device);
  }
  finish(state, w, device);
}

// One nanoGPT training step (bench/workloads.h): the model from nn::GPT, AdamW over its
// optimizer_groups (decay on >= 2-D parameters), fixed random token ids and targets.
struct GPTRun {
  GPTRun(const mantissa_bench::GPTWorkload& w, mt::Device dev, const char* float8_recipe = nullptr)
      : device(dev),
        model(seeded_gpt(w, dev)),
        idx(mt::randint(0, w.vocab_size, {w.batch, w.block_size},
                        mt::TensorOptions(dev).dtype(mt::kInt64))),
        targets(mt::randint(0, w.vocab_size, {w.batch * w.block_size},
                            mt::TensorOptions(dev).dtype(mt::kInt64))),
        optimizer(model->optimizer_groups(w.weight_decay),
                  {.lr = w.lr, .betas = {0.9, 0.95}, .weight_decay = w.weight_decay}) {
    // The table computes FLOPs from the workload's shape; the model must agree with it.
    MT_CHECK(model->flops_per_token() == mantissa_bench::gpt_flops_per_token(w), "bench ", w.name,
             ": nn::GPT counts ", model->flops_per_token(), " FLOPs per token, workloads.h ",
             mantissa_bench::gpt_flops_per_token(w));
    if (float8_recipe != nullptr)  // the blocks' Linear layers (the tied lm_head is not one)
      mt::nn::convert_to_float8_training(*model,
                                         mt::Float8LinearConfig::from_recipe(float8_recipe));
    delayed_float8 = !mt::nn::float8_delayed_layers(*model).empty();
  }

  static mt::nn::GPT seeded_gpt(const mantissa_bench::GPTWorkload& w, mt::Device dev) {
    mt::manual_seed(0);
    mt::nn::GPT gpt(mt::nn::GPTConfig{.block_size = w.block_size,
                                      .vocab_size = w.vocab_size,
                                      .n_layer = w.n_layer,
                                      .n_head = w.n_head,
                                      .n_embd = w.n_embd,
                                      .dropout = 0.0});
    gpt->to(dev);
    gpt->train();
    return gpt;
  }

  void step(std::optional<mt::amp::Precision> precision) {
    optimizer.zero_grad();
    mt::Tensor loss;
    {
      mt::amp::autocast scope(device, precision, precision.has_value());
      const mt::Tensor logits = model->forward(idx);
      loss = mt::nn::functional::cross_entropy(logits.view({-1, logits.size(-1)}), targets);
    }
    loss.backward();
    optimizer.step();
    if (delayed_float8) mt::nn::update_float8_scales(*model);  // as TrainingRun::step
  }

  mt::Device device;
  bool delayed_float8 = false;
  mt::nn::GPT model;
  mt::Tensor idx, targets;
  mt::optim::AdamW optimizer;
};

// `step` runs one of `run`'s training steps (eagerly, or as a replayed CUDA graph).
template <typename Step>
void time_gpt(benchmark::State& state, const mantissa_bench::GPTWorkload& w, GPTRun& run,
              Step&& step) {
  int64_t done = 0;
  for (auto _ : state) {
    step();
    sync_after_last(state, done, run.device);
  }
  const double iters = double(state.iterations());
  const double tokens = iters * double(w.tokens_per_step());
  state.counters["tokens_per_s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["gflops"] = benchmark::Counter(
      tokens * mantissa_bench::gpt_flops_per_token(w) / 1e9, benchmark::Counter::kIsRate);
  // Weights, gradients and AdamW's state over the parameters, as summary.json counts them.
  state.counters["bytes_per_param"] =
      mt::runner::training_memory(*run.model, run.optimizer).bytes_per_parameter();
  state.counters["peak_rss_mib"] = max_rss_mib();
  state.counters["base_rss_mib"] = g_base_rss_mib;
}

void bench_gpt(benchmark::State& state, const mantissa_bench::GPTWorkload& w, mt::Device device,
               std::optional<mt::amp::Precision> precision, const char* float8_recipe = nullptr) {
  GPTRun run(w, device, float8_recipe);
  time_gpt(state, w, run, [&] { run.step(precision); });
}

#if MANTISSA_CUDA
// The same training step captured once as a CUDA graph (cuda::GraphedStep) and replayed: the
// inputs live in static tensors, as CUDA graphs require.
void bench_train_graphed(benchmark::State& state, const Workload& w,
                         std::optional<mt::amp::Precision> precision) {
  const mt::Device device = mt::Device::cuda(0);
  TrainingRun run(w, device);
  mt::cuda::GraphedStep step([&] { run.step(precision); });
  int64_t done = 0;
  for (auto _ : state) {
    step();
    sync_after_last(state, done, device);
  }
  finish(state, w, device);
}

// The GPT step captured once and replayed: its token ids and targets are already static tensors.
void bench_gpt_graphed(benchmark::State& state, const mantissa_bench::GPTWorkload& w,
                       std::optional<mt::amp::Precision> precision) {
  GPTRun run(w, mt::Device::cuda(0));
  mt::cuda::GraphedStep step([&] { run.step(precision); });
  time_gpt(state, w, run, step);
}
#endif

// One Muon step over the hidden matrices of configs/gpt_tiny_muon.yaml's GPT (4 layers of
// n_embd 128: c_attn 384 x 128, attention c_proj 128 x 128, c_fc 512 x 128, MLP c_proj 128 x 512),
// with fixed gradients: the multi-tensor step (each shape's 4 matrices orthogonalised as one
// batch) or the matrix-by-matrix reference.
void bench_muon_step(benchmark::State& state, mt::Device device, bool fused) {
  mt::manual_seed(0);
  std::vector<mt::Tensor> params;
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {384, 128}, {128, 128}, {512, 128}, {128, 512}};
  for (int layer = 0; layer < 4; ++layer) {
    for (const auto& [rows, cols] : shapes) {
      mt::Tensor p = (mt::randn({rows, cols}) * 0.02).to(device).requires_grad_();
      p.set_grad(mt::randn({rows, cols}).to(device));
      params.push_back(p);
    }
  }
  mt::optim::MuonOptions o;
  o.lr = 0.02;
  mt::optim::Muon optimizer(params, o);
  optimizer.set_fused(fused);
  optimizer.step();  // warm-up: the momentum buffers
  int64_t done = 0;
  for (auto _ : state) {
    optimizer.step();
    sync_after_last(state, done, device);
  }
  state.counters["matrices"] = static_cast<double>(params.size());
}

void register_all() {
  std::vector<mt::Device> devices = {mt::Device::cpu()};
  if (mt::cuda::is_available()) devices.push_back(mt::Device::cuda(0));
  struct Mode {
    const char* name;
    mt::DType dtype;
    std::optional<mt::amp::Precision> precision;
  };
  const Mode modes[] = {{"float32", mt::DType::Float32, std::nullopt},
                        {"bfloat16", mt::DType::BFloat16, mt::amp::Precision::BFloat16},
                        {"float16", mt::DType::Float16, mt::amp::Precision::Float16}};
  for (const auto& w : mantissa_bench::workloads()) {
    for (const auto device : devices) {
      for (const auto& m : modes) {
        const std::string name =
            std::string(w.name) + "/" + (device.is_cuda() ? "cuda" : "cpu") + "/" + m.name;
        benchmark::internal::Benchmark* b = nullptr;
        if (w.name == "add") {
          b = benchmark::RegisterBenchmark(name.c_str(), [&w, device, m](benchmark::State& s) {
            bench_add(s, w, device, m.dtype);
          });
        } else if (!w.train) {
          b = benchmark::RegisterBenchmark(name.c_str(), [&w, device, m](benchmark::State& s) {
            bench_linear_fb(s, w, device, m.precision);
          });
        } else {
          b = benchmark::RegisterBenchmark(name.c_str(), [&w, device, m](benchmark::State& s) {
            bench_train(s, w, device, m.precision);
          });
        }
        b->Unit(benchmark::kMicrosecond)->UseRealTime();
      }
      // The MLPs with their Linear layers in float8 (nn/float8.h) under bfloat16 autocast.
      if (!w.train || w.name == "toy") continue;
      for (const char* recipe : {"tensorwise", "rowwise", "delayed"}) {
        const std::string name =
            std::string(w.name) + "/" + (device.is_cuda() ? "cuda" : "cpu") + "/float8_" + recipe;
        benchmark::RegisterBenchmark(name.c_str(),
                                     [&w, device, recipe](benchmark::State& s) {
                                       bench_train(s, w, device, mt::amp::Precision::BFloat16,
                                                   recipe);
                                     })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
#if MANTISSA_CUDA
    if (w.train && mt::cuda::is_available()) {
      for (const auto& m : modes) {
        const std::string name = std::string(w.name) + "/cuda_graph/" + m.name;
        benchmark::RegisterBenchmark(
            name.c_str(), [&w, m](benchmark::State& s) { bench_train_graphed(s, w, m.precision); })
            ->Unit(benchmark::kMicrosecond)
            ->UseRealTime();
      }
    }
#endif
  }
  for (const auto device : devices) {
    for (const bool fused : {true, false}) {
      const std::string name = std::string("muon_step/") + (device.is_cuda() ? "cuda" : "cpu") +
                               (fused ? "/multi_tensor" : "/per_matrix");
      benchmark::RegisterBenchmark(
          name.c_str(), [device, fused](benchmark::State& s) { bench_muon_step(s, device, fused); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
  // GPT steps: the small model on the CPU in float32 and bfloat16 autocast; GPT-2 small on the
  // GPU under bfloat16 autocast (registered only when one is present).
  for (const auto& w : mantissa_bench::gpt_workloads()) {
    const mt::Device device = w.gpu ? mt::Device::cuda(0) : mt::Device::cpu();
    if (device.is_cuda() && !mt::cuda::is_available()) continue;
    for (const auto& m : modes) {
      if (m.dtype == mt::DType::Float16 || (device.is_cuda() && !m.precision)) continue;
      const std::string name =
          std::string(w.name) + "/" + (device.is_cuda() ? "cuda" : "cpu") + "/" + m.name;
      benchmark::RegisterBenchmark(
          name.c_str(),
          [&w, device, m](benchmark::State& s) { bench_gpt(s, w, device, m.precision); })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
#if MANTISSA_CUDA
      if (device.is_cuda()) {
        const std::string graphed = std::string(w.name) + "/cuda_graph/" + m.name;
        benchmark::RegisterBenchmark(
            graphed.c_str(), [&w, m](benchmark::State& s) { bench_gpt_graphed(s, w, m.precision); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
#endif
    }
    // Its Linear layers in float8 under bfloat16 autocast, as the MLPs' rows.
    for (const char* recipe : {"tensorwise", "rowwise", "delayed"}) {
      const std::string name =
          std::string(w.name) + "/" + (device.is_cuda() ? "cuda" : "cpu") + "/float8_" + recipe;
      benchmark::RegisterBenchmark(name.c_str(),
                                   [&w, device, recipe](benchmark::State& s) {
                                     bench_gpt(s, w, device, mt::amp::Precision::BFloat16, recipe);
                                   })
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  g_base_rss_mib = max_rss_mib();
  try {
    register_all();
  } catch (const mt::Error& e) {
    std::fprintf(stderr, "mantissa_bench: %s\n", e.what());
    return 1;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // The CPU paths this run's numbers come from (bench/collect.py prints them with the table).
  benchmark::AddCustomContext("cpu_bf16_matmul",
                              mt::cpu::bf16_matmul_isa_name(mt::cpu::cpu_bf16_matmul_isa()));
  benchmark::AddCustomContext("cpu_float32_gemm", mt::cpu::cpu_float32_gemm_description());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
