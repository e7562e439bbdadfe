// Run configs: parsing, defaults, the resolved-YAML round trip, every kind of bad config (one line
// naming key, value and line), --set overrides, the model builder and the data/shape checks.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>

#include "engine/generator.h"
#include "hostile_yaml.h"
#include "nn/functional.h"
#include "nn/optim/sgd.h"
#include "nn/transformer.h"
#include "runner/config/config.h"
#include "runner/files/safetensors.h"
#include "runner/training/build_from_config.h"
#include "runner/training/determinism.h"
#include "runner/training/model_builder.h"
#include "test_util.h"

namespace rn = mantissa::runner;
namespace fs = std::filesystem;
using mantissa::Shape;

namespace {

std::string source_dir() {
  const char* s = std::getenv("MANTISSA_SOURCE_DIR");
  return s ? s : ".";
}

// Parses and expects a ConfigError whose one-line message contains every part.
void expect_config_error(const std::string& yaml, const std::vector<std::string>& parts,
                         const std::vector<std::string>& sets = {}) {
  try {
    rn::parse_config(yaml, "test.yaml", sets);
    ADD_FAILURE() << "expected a config error for:\n" << yaml;
  } catch (const rn::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("config error: ", 0), 0u) << msg;
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks: " << p;
  }
}

void expect_build_error(const std::string& yaml, const std::vector<std::string>& parts) {
  const rn::Config c = rn::parse_config(yaml, "test.yaml");
  try {
    rn::build_run(c);
    ADD_FAILURE() << "expected a config error from build_run for:\n" << yaml;
  } catch (const rn::ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << msg << "\nlacks: " << p;
  }
}

std::vector<std::string> param_names(const mantissa::nn::Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

}  // namespace

TEST(RunnerConfig, DefaultsForAnEmptyConfig) {
  const rn::Config c = rn::parse_config("", "empty.yaml", {}, "empty");
  EXPECT_EQ(c.name, "empty");
  EXPECT_EQ(c.model.preset, "toy");
  EXPECT_EQ(c.data.type, "teacher");
  EXPECT_EQ(c.loss.type, "mse");
  EXPECT_EQ(c.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(c.optimizer.lr(), 0.01);
  EXPECT_EQ(c.steps, 100);
  EXPECT_EQ(c.epochs, 0);
  EXPECT_EQ(c.precision, "float32");
  EXPECT_FALSE(c.scaler.enabled.has_value());
  EXPECT_EQ(c.origin.at("optimizer.lr"), "default");
}

TEST(RunnerConfig, ParsesTheBundledToyConfigWithLines) {
  const rn::Config c = rn::parse_config_file(source_dir() + "/configs/toy.yaml");
  EXPECT_EQ(c.name, "toy");
  EXPECT_EQ(c.optimizer.type, "sgd");
  EXPECT_DOUBLE_EQ(std::get<mantissa::optim::SGDOptions>(c.optimizer.options).momentum, 0.9);
  EXPECT_EQ(c.data.val_split, 0.125);
  EXPECT_EQ(c.steps, 300);
  EXPECT_EQ(c.origin.at("optimizer.type").rfind("line ", 0), 0u);
}

TEST(RunnerConfig, ResolvedYamlRoundTripsForEveryBundledConfig) {
  int n = 0;
  for (const auto& entry : fs::directory_iterator(source_dir() + "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const rn::Config c = rn::parse_config_file(entry.path().string());
    const std::string text = rn::to_yaml(c);
    const rn::Config back = rn::parse_config(text, "resolved.yaml");
    EXPECT_EQ(rn::to_yaml(back), text);
    EXPECT_EQ(rn::config_hash(rn::to_yaml(back)), rn::config_hash(text));
    ++n;
  }
  EXPECT_GE(n, 4);
}

TEST(RunnerConfig, RoundTripKeepsExactDoublesAndLayers) {
  const std::string yaml = R"(
optimizer: {type: adamw, lr: 0.1, betas: [0.8, 0.95], eps: 1e-7}
model:
  layers:
    - {type: conv2d, in: 1, out: 4, kernel: 3, padding: 1}
    - {type: maxpool2d, kernel: 2}
    - flatten
    - {type: layernorm, shape: 64}
    - {type: dropout, p: 0.25}
    - {type: gelu, approximate: tanh}
    - {type: linear, name: head, in: 64, out: 3, bias: false}
data: {type: csv, path: x.csv, target_columns: [y], target_dtype: int64, header: true}
loss: {type: cross_entropy, label_smoothing: 0.1}
schedule: {type: cosine, warmup_steps: 5, min_lr: 1e-5}
scaler: {enabled: true, init_scale: 128}
)";
  const rn::Config c = rn::parse_config(yaml, "t.yaml");
  const rn::Config back = rn::parse_config(rn::to_yaml(c), "resolved.yaml");
  EXPECT_EQ(back.optimizer.lr(), 0.1);
  EXPECT_EQ(std::get<mantissa::optim::AdamWOptions>(back.optimizer.options).betas.second, 0.95);
  EXPECT_EQ(std::get<mantissa::optim::AdamWOptions>(back.optimizer.options).eps, 1e-7);
  EXPECT_EQ(std::get<rn::CosineSchedule>(back.schedule.options).min_lr, 1e-5);
  ASSERT_EQ(back.model.layers.size(), 7u);
  EXPECT_EQ(back.model.layers[6].name, "head");
  EXPECT_FALSE(std::get<rn::LinearLayer>(back.model.layers[6].options).bias);
  EXPECT_EQ(std::get<rn::LayerNormLayer>(back.model.layers[3].options).shape,
            std::vector<int64_t>{64});
  // maxpool stride defaults to kernel
  EXPECT_EQ(std::get<rn::MaxPool2dLayer>(back.model.layers[1].options).stride, 2);
  EXPECT_EQ(std::get<rn::CsvOptions>(back.data.options).target_columns,
            std::vector<std::string>{"y"});
  EXPECT_EQ(std::get<rn::CsvOptions>(back.data.options).header, std::optional<bool>(true));
  EXPECT_EQ(back.scaler.enabled, std::optional<bool>(true));
  EXPECT_EQ(rn::to_yaml(back), rn::to_yaml(c));
}

// YAML anchors and aliases make the tree a graph: an alias inside its own anchor must be refused,
// not recursed through (it crashed), and aliases of aliases must be refused before they are
// expanded (under keys nobody knows, the unknown-key check expanded them and hung), in the file
// and in --set values alike. Aliases a config may use still work.
TEST(RunnerConfig, AliasCyclesAndAliasBombsAreRefusedNamingTheKey) {
  expect_config_error(mantissa::testing::kYamlAliasCycle, {"test.yaml: key 'a.0'", "a cycle"});
  expect_config_error("model: &m\n  layers: [*m]\n", {"key 'model.layers.0'", "a cycle"});
  expect_config_error("a: &a {b: *a}\n", {"key 'a.b'", "a cycle"});
  const std::string bomb = mantissa::testing::yaml_alias_bomb();
  const auto start = std::chrono::steady_clock::now();
  expect_config_error(bomb + "steps: 1\n", {"test.yaml: key 'a", "more than 100000 nodes"});
  expect_config_error("steps: 1\n", {"--set model: key 'model.0'", "a cycle"}, {"model=&a [*a]"});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  std::string deep = "x: ";
  for (int i = 0; i < 100; ++i) deep += "[";
  for (int i = 0; i < 100; ++i) deep += "]";
  expect_config_error(deep + "\n", {"key 'x.0.0.0", "nested more than 64 levels"});
  // Anchors and aliases that a config may use.
  const rn::Config c = rn::parse_config(
      "model:\n  layers:\n    - {type: linear, in: 10, out: &w 4}\n    - &act relu\n"
      "    - {type: linear, in: *w, out: *w}\n    - *act\n    - {type: linear, in: *w, out: 5}\n"
      "data: {type: teacher, samples: 16}\nsteps: 2\n",
      "test.yaml");
  ASSERT_EQ(c.model.layers.size(), 5u);
  EXPECT_EQ(std::get<rn::LinearLayer>(c.model.layers[2].options).in, 4);
  EXPECT_EQ(c.model.layers[3].type, "relu");
}

TEST(RunnerConfig, UnknownKeysSuggestTheNearestValidKey) {
  expect_config_error("steps: 10\nseed: 1\noptimiser:\n  lr: 0.1\n",
                      {"unknown key 'optimiser' at line 3 — did you mean 'optimizer'?"});
  expect_config_error(
      "optimizer:\n  type: sgd\n  lrr: 0.1\n",
      {"unknown key 'optimizer.lrr' at line 3 (value 0.1) — did you mean 'optimizer.lr'?"});
  expect_config_error("data:\n  batchsize: 8\n", {"'data.batchsize'", "'data.batch_size'"});
  expect_config_error("zzzzqqq: 1\n", {"unknown key 'zzzzqqq' at line 1", "valid keys here:"});
  expect_config_error("optimizer:\n  type: sgd\n  betas: [0.9, 0.99]\n",
                      {"'optimizer.betas' at line 3", "does not apply to optimizer.type 'sgd'"});
  expect_config_error("steps: 1\nsteps: 2\n", {"duplicate key 'steps' at line 2"});
}

TEST(RunnerConfig, WrongTypesAndRangesNameKeyValueAndLine) {
  expect_config_error("optimizer:\n  lr: fast\n",
                      {"optimizer.lr = fast (line 2): expected a number"});
  expect_config_error("optimizer:\n  lr: -1\n", {"optimizer.lr = -1 (line 2): must be > 0"});
  expect_config_error("data:\n  batch_size: 0\n", {"data.batch_size = 0 (line 2): must be >= 1"});
  expect_config_error("data:\n  batch_size: 2.5\n",
                      {"data.batch_size = 2.5", "expected an integer"});
  expect_config_error("data:\n  val_split: 1\n", {"data.val_split = 1", "must be in [0, 1)"});
  expect_config_error("data:\n  shuffle: maybe\n", {"data.shuffle = maybe", "true or false"});
  expect_config_error("precision: fp17\n", {"precision = fp17 (line 1)", "expected one of"});
  expect_config_error("precision: bfloat61\n", {"did you mean 'bfloat16'?"});
  expect_config_error("device: tpu\n", {"device = tpu (line 1)", "cpu, cuda or cuda:N"});
  expect_config_error("steps: 5\nepochs: 2\n", {"epochs = 2 (line 2)", "either steps or epochs"});
  expect_config_error("scaler:\n  backoff_factor: 1.5\n",
                      {"scaler.backoff_factor = 1.5", "[0, 1)"});
  expect_config_error("optimizer: {type: adam, betas: [0.9]}\n",
                      {"optimizer.betas", "[beta1, beta2]"});
  expect_config_error("optimizer: {type: sgd, nesterov: true}\n",
                      {"optimizer.nesterov", "momentum > 0"});
  expect_config_error("model: 3\n", {"model = 3 (line 1): expected a map"});
  expect_config_error("data: {type: csv}\n", {"data.path: required for data.type 'csv'"});
  expect_config_error("a: [1, 2\n", {"test.yaml is not valid YAML", "line"});
}

TEST(RunnerConfig, LayerListsAreValidated) {
  expect_config_error("model:\n  layers:\n    - relu\n    - {type: linear, in: 3}\n",
                      {"model.layers.1", "linear needs key 'out'"});
  expect_config_error("model:\n  layers:\n    - rleu\n",
                      {"model.layers.0 = rleu (line 3)", "did you mean 'relu'?"});
  expect_config_error("model:\n  layers:\n    - linear\n", {"model.layers.0", "needs parameters"});
  expect_config_error("model:\n  layers:\n    - {type: linear, in: 2, out: 2, stride: 1}\n",
                      {"model.layers.0.stride", "does not apply to model.layers.0.type 'linear'"});
  expect_config_error("model:\n  layers:\n    - {type: dropout, p: 1}\n",
                      {"model.layers.0.p = 1 (line 3)", "[0, 1)"});
  expect_config_error(
      "model:\n  layers:\n    - {type: relu, name: a}\n    - {type: tanh, name: a}\n",
      {"model.layers.1.name = a", "another layer already has this name"});
  expect_config_error("model:\n  preset: toy\n  layers: [relu]\n", {"not both"});
}

TEST(RunnerConfig, SetOverridesAreValidatedAndReportedAsSet) {
  const rn::Config c = rn::parse_config(
      "optimizer:\n  lr: 0.1\nmodel:\n  layers:\n    - {type: linear, in: 10, out: 4}\n", "t.yaml",
      {"optimizer.lr=0.5", "data.shuffle=false", "optimizer.type=adam", "model.layers.0.out=5",
       "schedule.type=step"});
  EXPECT_EQ(c.optimizer.lr(), 0.5);
  EXPECT_EQ(c.optimizer.type, "adam");
  EXPECT_FALSE(c.data.shuffle);
  EXPECT_EQ(std::get<rn::LinearLayer>(c.model.layers[0].options).out, 5);
  EXPECT_EQ(c.schedule.type, "step");
  EXPECT_EQ(c.origin.at("optimizer.lr"), "--set");
  expect_config_error("", {"optimizer.lr = abc (--set): expected a number"}, {"optimizer.lr=abc"});
  expect_config_error("", {"unknown key 'optimiser' at --set", "did you mean 'optimizer'?"},
                      {"optimiser.lr=1"});
  expect_config_error("", {"--set 'steps'", "key.path=value"}, {"steps"});
  expect_config_error("model:\n  layers: [relu]\n", {"'model.layers.3' is not an index"},
                      {"model.layers.3.p=1"});
}

// What a careless config or shell line produces must not pass as something else.
TEST(RunnerConfig, QuotedNumbersUnterminatedQuotesAndEmptySetValuesAreRefused) {
  expect_config_error(
      "data:\n  batch_size: \"32\"\n",
      {"data.batch_size = 32 (line 2)", "expected an integer, not a quoted string"});
  expect_config_error("optimizer:\n  lr: '0.1'\n", {"optimizer.lr", "not a quoted string"});
  expect_config_error("deterministic: \"true\"\n", {"deterministic", "not a quoted string"});
  expect_config_error("name: \"abc\nsteps: 5\n", {"test.yaml line 1", "unterminated quote"});
  expect_config_error("name: 'abc\nsteps: 5\n", {"unterminated quote", "'"});
  expect_config_error("", {"--set optimizer.lr", "empty"}, {"optimizer.lr="});
  expect_config_error("", {"--set name", "not valid YAML"}, {"name=\"abc"});
  // Closed quotes, escapes included, are fine; a string key may still be quoted.
  const rn::Config ok = rn::parse_config(
      "name: \"a\\\"b\"\ndevice: 'cpu'\noptimizer: {type: \"adam\", lr: 0.5}\n", "ok.yaml");
  EXPECT_EQ(ok.name, "a\"b");
  EXPECT_EQ(ok.device, "cpu");
  EXPECT_EQ(ok.optimizer.lr(), 0.5);
}

TEST(RunnerConfig, BinaryBytesInAConfigAreEscapedInTheMessage) {
  const std::string binary = std::string(
                                 "\x7f"
                                 "ELF\x02\x01\x01\0\0\0",
                                 10) +
                             "\"\\\x9c";
  try {
    rn::parse_config(binary, "bin.yaml");
    ADD_FAILURE() << "a binary file was accepted as a config";
  } catch (const rn::ConfigError& e) {
    const std::string msg = e.what();
    for (const char c : msg) {
      const auto b = static_cast<unsigned char>(c);
      EXPECT_TRUE(b >= 0x20 && b < 0x7f) << "raw byte " << int{b} << " in: " << msg;
    }
  }
}

TEST(RunnerConfig, NearestKey) {
  EXPECT_EQ(rn::nearest_key("optimiser", {"model", "optimizer", "data"}), "optimizer");
  EXPECT_EQ(rn::nearest_key("LR", {"lr", "eps"}), "lr");
  EXPECT_EQ(rn::nearest_key("completely_else", {"lr", "eps"}), "");
}

TEST(RunnerModelBuilder, ParameterNamesFollowPyTorch) {
  mantissa::manual_seed(0);
  auto toy = rn::build_model(rn::parse_config("", "t").model);
  EXPECT_EQ(param_names(*toy),
            (std::vector<std::string>{"net1.weight", "net1.bias", "net2.weight", "net2.bias"}));
  EXPECT_EQ(toy->forward(mantissa::randn({3, 10})).shape(), (Shape{3, 5}));

  const rn::Config c = rn::parse_config(
      "model:\n  layers:\n    - {type: linear, in: 4, out: 8}\n    - relu\n"
      "    - {type: layernorm, shape: 8}\n    - {type: linear, name: head, in: 8, out: 2}\n",
      "t");
  auto seq = rn::build_model(c.model);
  EXPECT_EQ(param_names(*seq), (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias",
                                                         "head.weight", "head.bias"}));
  EXPECT_EQ(seq->forward(mantissa::randn({5, 4})).shape(), (Shape{5, 2}));
  EXPECT_EQ(rn::output_key(c.model), "model.layers.3.out");
}

TEST(RunnerModelBuilder, ShapeInferenceMatchesTheModelAndNamesTheLayer) {
  const rn::Config c = rn::parse_config_file(source_dir() + "/configs/mnist_cnn.yaml");
  EXPECT_EQ(rn::infer_output_shape(c, Shape{1, 28, 28}, "input"), (Shape{10}));
  mantissa::manual_seed(0);
  auto model = rn::build_model(c.model);
  EXPECT_EQ(model->forward(mantissa::randn({2, 1, 28, 28})).shape(), (Shape{2, 10}));
  mantissa::testing::expect_error(
      [&] {
        rn::infer_output_shape(c, Shape{1, 32, 32}, "data input shape [1, 32, 32]");
      },
      {"model.layers.7.in = 784", "line", "does not match the input", "[1024]"});
  mantissa::testing::expect_error([&] { rn::infer_output_shape(c, Shape{784}, "data"); },
                                  {"model.layers.0.in", "needs [channels, height, width]"});
}

TEST(RunnerBuild, ShapeMismatchesAgainstTheDataAreConfigErrors) {
  expect_build_error(
      "model:\n  layers:\n    - {type: linear, in: 12, out: 5}\ndata: {type: teacher}\n",
      {"model.layers.0.in = 12 (line 3)", "[10]"});
  expect_build_error(
      "model:\n  layers:\n    - {type: linear, in: 10, out: 3}\ndata: {type: teacher}\n",
      {"model.layers.0.out = 3 (line 3)", "outputs [3]", "targets are [5]"});
  expect_build_error("data: {type: sine}\n", {"model.preset", "10 input features", "[1]"});
  // A layer too large to allocate names the key that asked for it.
  expect_build_error(
      "model:\n  layers:\n    - {type: linear, in: 10, out: 100000000000}\n"
      "    - {type: linear, in: 100000000000, out: 5}\ndata: {type: teacher}\n",
      {"config error: model.layers.0.out: cannot build model.layers.0 (linear, in 10, out "
       "100000000000)",
       "out of memory"});
  expect_build_error(
      "model:\n  layers:\n    - {type: linear, in: 2, out: 2}\ndata: {type: spirals}\n",
      {"loss.type", "needs floating-point targets", "cross_entropy"});
  expect_build_error(
      "model:\n  layers:\n    - {type: linear, in: 10, out: 5}\nloss: {type: cross_entropy}\n",
      {"loss.type", "int64 class labels"});
  expect_build_error(
      "model:\n  layers:\n    - {type: linear, in: 2, out: 1}\ndata: {type: spirals}\n"
      "loss: {type: cross_entropy}\n",
      {"model.layers.0.out = 1", "labels go from 0 to 1"});
  expect_build_error("data:\n  type: csv\n  path: /nonexistent/x.csv\n",
                     {"data.path = /nonexistent/x.csv (line 3): file not found"});
  expect_build_error("model:\n  init_from: /nonexistent/w.safetensors\n",
                     {"model.init_from", "(line 2): file not found"});
  expect_build_error("device: cuda:7\n", {"device = cuda:7 (line 1)"});
  expect_build_error("data: {batch_size: 2000, drop_last: true}\nsteps: 1\n",
                     {"data.batch_size = 2000", "no batches"});
}

// Values that would fail only after the run directory is written are config errors that name
// their key.
TEST(RunnerBuild, SizesDtypesAndNonFiniteDataAreCaughtBeforeTheRun) {
  expect_config_error("name: " + std::string(201, 'n') + "\n", {"name", "at most 200 bytes"});
  expect_build_error("epochs: 9223372036854775807\n",
                     {"epochs", "more steps than int64 can count"});
  expect_build_error("data: {samples: 100000000000}\n", {"data.samples", "out of memory"});

  const fs::path dir = fs::temp_directory_path() / ("mt_cfg_values_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string half = (dir / "half.safetensors").string();
  rn::save_safetensors(half, {{"inputs", mantissa::rand({8, 10}).to(mantissa::kFloat16)},
                              {"targets", mantissa::rand({8, 5})}});
  expect_build_error("data: {type: safetensors, path: " + half + "}\n",
                     {"data.inputs", "inputs are float16", "float32"});
  mantissa::Tensor x = mantissa::rand({8, 10});
  x.data<float>()[3 * 10 + 4] = std::numeric_limits<float>::quiet_NaN();
  const std::string nan = (dir / "nan.safetensors").string();
  rn::save_safetensors(nan, {{"inputs", x}, {"targets", mantissa::rand({8, 5})}});
  expect_build_error("data: {type: safetensors, path: " + nan + "}\n",
                     {"data.inputs", "nan at example 3"});
  mantissa::Tensor y = mantissa::rand({8, 5});
  y.data<float>()[6 * 5] = std::numeric_limits<float>::infinity();
  const std::string inf = (dir / "inf.safetensors").string();
  rn::save_safetensors(inf, {{"inputs", mantissa::rand({8, 10})}, {"targets", y}});
  expect_build_error("data: {type: safetensors, path: " + inf + "}\n",
                     {"data.targets", "inf at example 6"});
  fs::remove_all(dir);
}

// As in PyTorch, a label equal to loss.ignore_index marks an example the loss skips; other labels
// must be classes of the model, and some example must count.
TEST(RunnerBuild, LabelsEqualToIgnoreIndexAreSkippedOthersMustBeClasses) {
  const fs::path dir = fs::temp_directory_path() / ("mt_cfg_ignore_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto config_for = [&](const std::vector<int64_t>& labels) {
    const std::string path = (dir / ("l" + std::to_string(labels[0]) + ".safetensors")).string();
    const auto n = static_cast<int64_t>(labels.size());
    rn::save_safetensors(path, {{"inputs", mantissa::rand({n, 4})},
                                {"targets", mantissa::from_vector(labels, Shape{n})}});
    return "model:\n  layers:\n    - {type: linear, in: 4, out: 3}\n"
           "data: {type: safetensors, path: " +
           path + ", batch_size: 2}\nloss: {type: cross_entropy}\n";
  };
  EXPECT_NO_THROW(rn::build_run(rn::parse_config(config_for({0, -100, 2, -100}), "t.yaml")));
  expect_build_error(config_for({-100, -100}), {"loss.ignore_index", "no example counts"});
  expect_build_error(config_for({1, -5, 2}),
                     {"data.targets", "-5 at example 1 (0-based)", "not loss.ignore_index (-100)"});
  expect_build_error(config_for({2, 3}),
                     {"model.layers.0.out", "labels go from 2 to 3", "-100, are skipped"});
  fs::remove_all(dir);
}

// One rule for every reader: a CSV label equal to the loss's ignore_index is read and skipped as
// the same label in a safetensors file is; a run over either file gives the same losses, and a
// batch whose every label is skipped gives PyTorch's NaN for the mean in both. Other negative
// labels are refused naming file, line and column.
TEST(RunnerBuild, CsvAndSafetensorsLabelsEqualToIgnoreIndexAreReadAlike) {
  const fs::path dir = fs::temp_directory_path() / ("mt_cfg_csv_ii_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<int64_t> labels = {-100, -100, 1, 0, 2, -100, 0, 1};
  const std::vector<float> x = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.5f, 0.75f, -2.0f};
  const std::string csv = (dir / "lab.csv").string();
  {
    std::ofstream f(csv);
    f << "x,y\n";
    for (size_t i = 0; i < labels.size(); ++i) f << x[i] << "," << labels[i] << "\n";
  }
  const std::string st = (dir / "lab.safetensors").string();
  rn::save_safetensors(st, {{"inputs", mantissa::from_vector(x, Shape{8, 1})},
                            {"targets", mantissa::from_vector(labels, Shape{8})}});
  const std::string rest =
      "model:\n  layers:\n    - {type: linear, in: 1, out: 3}\nloss: {type: cross_entropy}\n"
      "steps: 4\nlog_every: 1\n";
  auto losses = [&](const std::string& data) {
    rn::RunObjects r = rn::build_run(rn::parse_config(data + rest, "t.yaml"));
    std::vector<double> out;
    for (int64_t step = 0; step < 4; ++step) {
      const auto batch = r.train_loader->next();
      if (!batch) break;
      out.push_back(r.loss(r.forward(batch->input), batch->target).item<double>());
    }
    return out;
  };
  const auto from_csv = losses("data: {type: csv, path: " + csv +
                               ", target_columns: [y], target_dtype: int64, batch_size: 2, "
                               "shuffle: false}\n");
  const auto from_st =
      losses("data: {type: safetensors, path: " + st + ", batch_size: 2, shuffle: false}\n");
  ASSERT_EQ(from_csv.size(), 4u);
  ASSERT_EQ(from_st.size(), 4u);
  EXPECT_TRUE(std::isnan(from_csv[0])) << "every label of the first batch is ignored";
  EXPECT_TRUE(std::isnan(from_st[0]));
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_TRUE(std::isfinite(from_csv[i])) << i;
    EXPECT_EQ(from_csv[i], from_st[i]) << "batch " << i;
  }
  {
    std::ofstream f(csv);
    f << "x,y\n0.5,1\n0.25,-5\n";
  }
  expect_build_error(
      "data: {type: csv, path: " + csv + ", target_columns: [y], target_dtype: int64}\n" + rest,
      {"lab.csv:3: column 2 ('y'): class label '-5' is not an integer in [0, 2^31)",
       "nor loss.ignore_index (-100, a label the loss skips)"});
  // Without a loss that ignores a label, -100 is no class.
  {
    std::ofstream f(csv);
    f << "x,y\n0.5,1\n0.25,-100\n";
  }
  try {
    rn::CsvOptions o;
    o.path = csv;
    o.target_columns = {"y"};
    o.target_dtype = mantissa::DType::Int64;
    (void)rn::load_csv_dataset(o);
    ADD_FAILURE() << "a label of -100 without an ignore_index was read";
  } catch (const mantissa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("class label '-100' is not an integer in [0, 2^31)"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(RunnerBuild, BuildsEveryPartFromTheConfig) {
  const rn::Config c = rn::parse_config(
      "optimizer: {type: adamw, lr: 0.002}\nschedule: {type: cosine, warmup_steps: 3}\n"
      "data: {samples: 100, val_split: 0.2, batch_size: 16}\nprecision: bfloat16\nsteps: 7\n",
      "t.yaml");
  rn::RunObjects r = rn::build_run(c);
  EXPECT_EQ(r.device, mantissa::try_gpu());
  EXPECT_EQ(r.train_data->size(), 80);
  EXPECT_EQ(r.val_data->size(), 20);
  EXPECT_EQ(r.train_loader->batches_per_epoch(), 5);
  EXPECT_STREQ(r.optimizer->name(), "AdamW");
  EXPECT_DOUBLE_EQ(r.optimizer->param_groups()[0].get("weight_decay"), 0.01);
  ASSERT_NE(r.scheduler, nullptr);
  EXPECT_EQ(r.trainer_options.max_steps, 7);
  EXPECT_EQ(r.trainer_options.precision, mantissa::amp::Precision::BFloat16);
  ASSERT_TRUE(r.trainer_options.scaler.has_value());
  EXPECT_FALSE(r.trainer_options.scaler->enabled);  // auto: float16 only
  EXPECT_EQ(r.trainer_options.config_hash, rn::config_hash(r.config_text));
  // Same seed, same initial weights.
  rn::RunObjects r2 = rn::build_run(c);
  EXPECT_TRUE(mantissa::equal(r.model->named_parameters()[0].second,
                              r2.model->named_parameters()[0].second));
}

TEST(RunnerBuild, InitFromLoadsSafetensorsWeights) {
  const fs::path dir = fs::temp_directory_path() / ("mt_cfg_init_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "w.safetensors").string();
  mantissa::manual_seed(123);
  auto source = rn::build_model(rn::parse_config("", "t").model);
  rn::save_weights(*source, path);
  const rn::Config c = rn::parse_config("model:\n  init_from: " + path + "\n", "t.yaml");
  rn::RunObjects r = rn::build_run(c);
  EXPECT_TRUE(mantissa::equal(r.model->named_parameters()[2].second.cpu(),
                              source->named_parameters()[2].second));
  // A file for another model is refused naming the key.
  const rn::Config bad = rn::parse_config(
      "model:\n  init_from: " + path + "\n  layers:\n    - {type: linear, in: 10, out: 5}\n",
      "t.yaml");
  try {
    rn::build_run(bad);
    ADD_FAILURE() << "expected init_from to be refused";
  } catch (const rn::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.init_from"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(RunnerConfig, BceWithLogitsPosWeight) {
  const rn::Config c =
      rn::parse_config("loss:\n  type: bce_with_logits\n  pos_weight: [1, 2, 3, 4, 5]\n", "t.yaml");
  const auto pos_weight = [](const rn::Config& cfg) {
    return std::get<rn::BceWithLogitsLossOptions>(cfg.loss.options).pos_weight;
  };
  EXPECT_EQ(pos_weight(c), (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(c.describe("loss.pos_weight"), "loss.pos_weight = [1, 2, 3, 4, 5] (line 3)");
  const rn::Config one =
      rn::parse_config("loss: {type: bce_with_logits, pos_weight: 2.5}\n", "t.yaml");
  EXPECT_EQ(pos_weight(one), (std::vector<double>{2.5}));
  // The resolved YAML keeps it (and parses back to the same weights).
  const std::string yaml = rn::to_yaml(c);
  EXPECT_NE(yaml.find("pos_weight: [1.0, 2.0, 3.0, 4.0, 5.0]"), std::string::npos) << yaml;
  EXPECT_EQ(pos_weight(rn::parse_config(yaml, "resolved")), pos_weight(c));
  EXPECT_EQ(pos_weight(rn::parse_config("loss: {type: bce_with_logits}\n", "t")).size(), 0u);

  expect_config_error("loss:\n  type: bce_with_logits\n  pos_weight: -1\n",
                      {"loss.pos_weight = -1 (line 3)", ">= 0"});
  expect_config_error("loss:\n  type: bce_with_logits\n  pos_weight: [1, x]\n",
                      {"loss.pos_weight = x (line 3)", "expected a number"});
  expect_config_error("loss:\n  type: bce_with_logits\n  pos_weight: []\n",
                      {"loss.pos_weight", "non-empty"});
  expect_config_error("loss:\n  type: mse\n  pos_weight: 2\n",
                      {"loss.pos_weight", "line 3", "does not apply to loss.type 'mse'"});
  // One weight per output: the toy model outputs 5.
  expect_build_error("loss:\n  type: bce_with_logits\n  pos_weight: [1, 2]\n",
                     {"loss.pos_weight = [1, 2] (line 3)", "has 2 weights", "outputs [5]"});

  // The built loss applies the weights, as PyTorch's BCEWithLogitsLoss(pos_weight=...).
  rn::RunObjects r = rn::build_run(c);
  rn::RunObjects plain = rn::build_run(rn::parse_config("loss: {type: bce_with_logits}\n", "t"));
  const mantissa::Tensor out = mantissa::randn({4, 5});
  const mantissa::Tensor target = mantissa::rand({4, 5});
  const mantissa::Tensor expected = mantissa::nn::functional::binary_cross_entropy_with_logits(
      out, target, mantissa::nn::Reduction::Mean,
      mantissa::from_vector(std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_TRUE(mantissa::equal(r.loss(out, target), expected));
  EXPECT_FALSE(mantissa::equal(plain.loss(out, target), expected));
}

TEST(RunnerDeterminism, ConvOnCudaIsRefusedUnlessDeterministicIsOff) {
  const rn::Config c = rn::parse_config(
      "model:\n  layers:\n    - {type: conv2d, in: 1, out: 2, kernel: 3}\n    - flatten\n",
      "t.yaml");
  EXPECT_TRUE(c.deterministic);  // the default
  auto model = rn::build_model(c.model);
  EXPECT_TRUE(rn::nondeterministic_parts(*model, mantissa::Device::cpu()).empty());
  const auto parts = rn::nondeterministic_parts(*model, mantissa::Device::cuda(0));
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_NE(parts[0].find("conv2d '0'"), std::string::npos) << parts[0];
  EXPECT_NE(parts[0].find("cuda:0"), std::string::npos) << parts[0];
  auto linear = rn::build_model(rn::parse_config("", "t").model);
  EXPECT_TRUE(rn::nondeterministic_parts(*linear, mantissa::Device::cuda(0)).empty());

  // The Trainer refuses before touching the device (so this runs without a GPU too).
  auto loader =
      std::make_shared<rn::DataLoader>(rn::make_teacher_dataset({}), rn::DataLoaderOptions{});
  auto opt = std::make_shared<mantissa::optim::SGD>(model->parameters(), 0.1);
  auto loss = [](const mantissa::Tensor& o, const mantissa::Tensor& t) {
    return mantissa::nn::functional::mse_loss(o, t);
  };
  rn::TrainerOptions o;
  o.device = mantissa::Device::cuda(0);
  mantissa::testing::expect_error(
      [&] { rn::Trainer t(model, loss, opt, loader, o); },
      {"Trainer: deterministic is set", "conv2d '0'", "cuda:0", "deterministic = false"});
  o.device = mantissa::Device::cpu();
  EXPECT_NO_THROW({ rn::Trainer t(model, loss, opt, loader, o); });
}

TEST(RunnerBuild, EvalLossWithSumReductionDoesNotDependOnTheBatchSize) {
  auto eval_loss = [](int64_t batch_size) {
    const rn::Config c = rn::parse_config(
        "loss: {type: mse, reduction: sum}\ndata: {samples: 100, val_split: 0.5, batch_size: " +
            std::to_string(batch_size) + "}\n",
        "t.yaml");
    rn::RunObjects r = rn::build_run(c);
    EXPECT_TRUE(r.trainer_options.loss_sums_over_batch);
    rn::Trainer trainer(r.model, r.loss, r.optimizer, r.train_loader, r.trainer_options);
    return trainer.evaluate(*r.val_loader).loss;
  };
  // Same seed, same model and split; only the batching differs. Weighting batch sums by the batch
  // size (the old behaviour) made these differ by about the batch-size ratio.
  const double small = eval_loss(5), large = eval_loss(50);
  EXPECT_NEAR(small, large, 1e-5 * std::abs(large));
}

// The losses beyond mse/l1/cross_entropy/bce_with_logits and their options: each key reaches the
// built loss, applies only to its types and is checked against the model's output.
TEST(RunnerConfig, LossTypesWithTheirOptions) {
  namespace F = mantissa::nn::functional;
  using mantissa::nn::KlDivReduction;
  using mantissa::nn::Reduction;
  const mantissa::Tensor out = mantissa::randn({4, 5});
  const mantissa::Tensor target = mantissa::randn({4, 5});
  const mantissa::Tensor probs = mantissa::rand({4, 5});
  const auto built = [](const std::string& yaml) {
    return rn::build_run(rn::parse_config(yaml, "t.yaml")).loss;
  };
  const rn::Config smooth = rn::parse_config("loss: {type: smooth_l1, beta: 0.5}\n", "t.yaml");
  EXPECT_EQ(std::get<rn::SmoothL1LossOptions>(smooth.loss.options).beta, 0.5);
  EXPECT_TRUE(mantissa::equal(built("loss: {type: smooth_l1, beta: 0.5}\n")(out, target),
                              F::smooth_l1_loss(out, target, Reduction::Mean, 0.5)));
  EXPECT_TRUE(
      mantissa::equal(built("loss: {type: huber, delta: 0.25, reduction: sum}\n")(out, target),
                      F::huber_loss(out, target, Reduction::Sum, 0.25)));
  EXPECT_TRUE(mantissa::equal(
      built("loss: {type: kl_div, reduction: batchmean, log_target: true}\n")(out, target),
      F::kl_div(out, target, KlDivReduction::BatchMean, true)));
  const std::vector<float> w{1, 2, 3, 4, 5};
  const mantissa::Tensor wt = mantissa::from_vector(w, Shape{5});
  EXPECT_TRUE(mantissa::equal(built("loss: {type: bce, weight: [1, 2, 3, 4, 5]}\n")(probs, probs),
                              F::binary_cross_entropy(probs, probs, Reduction::Mean, wt)));
  EXPECT_TRUE(mantissa::equal(
      built("loss: {type: bce_with_logits, weight: [1, 2, 3, 4, 5], pos_weight: 2}\n")(out, probs),
      F::binary_cross_entropy_with_logits(out, probs, Reduction::Mean,
                                          mantissa::from_vector(std::vector<float>{2}, Shape{1}),
                                          wt)));

  expect_config_error("loss: {type: huber, delta: 0}\n", {"loss.delta", "> 0"});
  expect_config_error("loss: {type: smooth_l1, beta: -1}\n", {"loss.beta", ">= 0"});
  expect_config_error("loss: {type: mse, beta: 2}\n", {"loss.beta", "does not apply"});
  expect_config_error("loss: {type: mse, weight: [1, 2]}\n", {"loss.weight", "does not apply"});
  expect_config_error("loss: {type: huber, reduction: average}\n", {"loss.reduction", "batchmean"});
  expect_build_error("loss: {type: mse, reduction: batchmean}\n",
                     {"loss.reduction", "kl_div only"});
  expect_build_error("loss: {type: bce, weight: [1, 2]}\n",
                     {"loss.weight", "has 2 weights", "outputs [5]"});
  expect_build_error("precision: bfloat16\nloss: {type: bce}\n",
                     {"loss.type", "unsafe to autocast", "bce_with_logits"});
}

TEST(RunnerBuild, CrossEntropyClassWeights) {
  const fs::path dir = fs::temp_directory_path() / ("mt_cfg_weight_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "labels.safetensors").string();
  rn::save_safetensors(
      path, {{"inputs", mantissa::rand({4, 4})},
             {"targets", mantissa::from_vector(std::vector<int64_t>{0, 1, 2, 1}, Shape{4})}});
  const std::string base =
      "model:\n  layers:\n    - {type: linear, in: 4, out: 3}\n"
      "data: {type: safetensors, path: " +
      path + ", batch_size: 2}\n";
  rn::RunObjects r = rn::build_run(
      rn::parse_config(base + "loss: {type: cross_entropy, weight: [1, 2, 0.5]}\n", "t"));
  const mantissa::Tensor logits = mantissa::randn({4, 3});
  const mantissa::Tensor labels = mantissa::from_vector(std::vector<int64_t>{0, 1, 2, 1}, Shape{4});
  EXPECT_TRUE(mantissa::equal(r.loss(logits, labels),
                              mantissa::nn::functional::cross_entropy(
                                  logits, labels, mantissa::nn::Reduction::Mean, 0.0, -100,
                                  mantissa::from_vector(std::vector<float>{1, 2, 0.5}, Shape{3}))));
  expect_build_error(base + "loss: {type: cross_entropy, weight: [1, 2]}\n",
                     {"loss.weight", "has 2 weights", "3 class scores"});
  fs::remove_all(dir);
}

// model.activation_checkpointing: true (every block), a list of blocks, or false; the model is
// built with those blocks checkpointed, and a block past the last or listed twice is refused.
TEST(RunnerConfig, GptActivationCheckpointing) {
  const auto blocks = [](const std::string& value) {
    const rn::Config c = rn::parse_config(
        "model: {preset: gpt, n_layer: 3, n_head: 2, n_embd: 8, block_size: 8, "
        "activation_checkpointing: " +
            value + "}\n",
        "t.yaml");
    const auto model = rn::build_run_model(c.model);
    const auto* gpt = dynamic_cast<const mantissa::nn::GPTImpl*>(model.get());
    EXPECT_NE(gpt, nullptr);
    return gpt != nullptr ? gpt->activation_checkpointing() : std::vector<int64_t>{-1};
  };
  EXPECT_EQ(blocks("true"), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(blocks("[2, 0]"), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(blocks("1"), (std::vector<int64_t>{1}));
  EXPECT_EQ(blocks("false"), (std::vector<int64_t>{}));
  // Kept in resolved.yaml as given (left out while false, so existing configs keep their hash).
  const rn::Config c = rn::parse_config(
      "model: {preset: gpt, n_layer: 3, activation_checkpointing: [0, 2]}\n", "t.yaml");
  EXPECT_NE(rn::to_yaml(c).find("activation_checkpointing: [0, 2]"), std::string::npos);
  EXPECT_EQ(rn::to_yaml(rn::parse_config("model: {preset: gpt}\n", "t")).find("checkpointing"),
            std::string::npos);
  const std::string gpt = "model: {preset: gpt, n_layer: 3, activation_checkpointing: ";
  expect_config_error(gpt + "[3]}\n",
                      {"model.activation_checkpointing", "must be < model.n_layer"});
  expect_config_error(gpt + "[1, 1]}\n", {"model.activation_checkpointing", "block 1 twice"});
  expect_config_error(gpt + "[-1]}\n", {"model.activation_checkpointing", ">= 0"});
  expect_config_error(gpt + "yes}\n", {"model.activation_checkpointing", "true, false or a list"});
  expect_config_error("model: {preset: toy, activation_checkpointing: true}\n",
                      {"model.activation_checkpointing", "does not apply"});
  // Selective: checkpoint_keep_attention keeps each checkpointed block's attention output.
  const rn::Config keep = rn::parse_config(
      "model: {preset: gpt, n_layer: 3, n_head: 2, n_embd: 8, block_size: 8, "
      "activation_checkpointing: true, checkpoint_keep_attention: true}\n",
      "t.yaml");
  EXPECT_NE(rn::to_yaml(keep).find("checkpoint_keep_attention: true"), std::string::npos);
  const auto model = rn::build_run_model(keep.model);
  const auto* kept = dynamic_cast<const mantissa::nn::GPTImpl*>(model.get());
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->activation_checkpointing_options().save_ops,
            (std::vector<std::string>{"scaled_dot_product_attention"}));
  expect_config_error("model: {preset: gpt, n_layer: 3, checkpoint_keep_attention: true}\n",
                      {"model.checkpoint_keep_attention", "needs model.activation_checkpointing"});
}

// model.fused_head_loss: the run's forward stops at the GPT's hidden states and its loss applies
// the tied output layer through linear_cross_entropy: the loss of the unfused head on the same
// batch. Only with a cross_entropy loss without class weights; kept in resolved.yaml when set.
TEST(RunnerConfig, GptFusedHeadLoss) {
  const std::string base =
      "model: {preset: gpt, n_layer: 2, n_head: 2, n_embd: 16, block_size: 8, "
      "fused_head_loss: true}\n"
      "data: {type: text, path: " +
      source_dir() + "/data/shakespeare/input.txt, block_size: 8, batch_size: 4}\n";
  rn::RunObjects r = rn::build_run(
      rn::parse_config(base + "loss: {type: cross_entropy, label_smoothing: 0.1}\n", "t.yaml"));
  const auto batch = r.train_loader->next();
  ASSERT_TRUE(batch.has_value());
  const mantissa::Tensor hidden = r.forward(batch->input);
  EXPECT_EQ(hidden.shape(), (Shape{4, 8, 16}));
  const mantissa::Tensor logits = r.model->forward(batch->input);
  const mantissa::Tensor unfused = mantissa::nn::functional::cross_entropy(
      logits.reshape({-1, 256}), batch->target.reshape({-1}), mantissa::nn::Reduction::Mean, 0.1);
  mantissa::testing::expect_close(r.loss(hidden, batch->target), unfused, 1e-6, 1e-6, "loss");
  EXPECT_NE(rn::to_yaml(r.config).find("fused_head_loss: true"), std::string::npos);
  EXPECT_EQ(rn::to_yaml(rn::parse_config("model: {preset: gpt}\n", "t")).find("fused_head"),
            std::string::npos);
  expect_build_error(base + "loss: {type: cross_entropy, weight: [1, 2]}\n",
                     {"model.fused_head_loss", "class weights"});
  expect_config_error("model: {preset: toy, fused_head_loss: true}\n",
                      {"model.fused_head_loss", "does not apply"});
}
