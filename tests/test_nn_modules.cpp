// nn modules against PyTorch: Embedding, Conv1d, Conv2d with padding "same", ConvTranspose2d,
// AdaptiveAvgPool2d, MaxPool2d with indices and Identity (forward values and gradients for
// given weights, float64), the state_dict names of ModuleList and ModuleDict, and the init
// bounds of the new convolutions. Every case is also in scripts/golden/make_modules.py, whose
// results are committed in tests/golden/modules.txt.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "golden_file.h"
#include "nn/conv.h"
#include "nn/layers.h"
#include "nn/pooling.h"
#include "runner/config/config.h"
#include "runner/training/model_builder.h"
#include "test_util.h"

namespace mt = mantissa;
namespace nn = mantissa::nn;
using mt::Shape;
using mt::Tensor;

namespace {

using Records = std::vector<std::pair<std::string, Tensor>>;

std::map<std::string, Records> load_cases() {
  std::map<std::string, Records> cases;
  for (const auto& [name, c] : mt::testing::read_golden_file("modules.txt")) {
    Records& records = cases[name];
    for (const auto& t : c.tensors) records.emplace_back(t.name, t.f64());
  }
  return cases;
}

const std::map<std::string, Records>& golden() {
  static const std::map<std::string, Records> cases = load_cases();
  return cases;
}

const Tensor& record(const Records& r, const std::string& name) {
  for (const auto& [n, t] : r)
    if (n == name) return t;
  MT_THROW("golden record has no tensor '", name, "'");
}

// How a case feeds its module: a float input that gets a gradient, int64 indices, or a float
// input through MaxPool2d::forward_with_indices.
enum class Feed { Float, Indices, MaxPoolIndices };

struct ModuleCase {
  std::function<std::shared_ptr<nn::UnaryModule>()> make;
  Feed feed = Feed::Float;
};

using Outputs = std::map<std::string, Tensor>;

// The modules of make_modules.py's value cases, by case name.
const std::map<std::string, ModuleCase>& module_cases() {
  using mt::Size2;
  static const std::map<std::string, ModuleCase> all = {
      {"embedding", {[] { return nn::Embedding(7, 3, 2).ptr(); }, Feed::Indices}},
      {"embedding_negative_padding_idx",
       {[] { return nn::Embedding(5, 4, -1).ptr(); }, Feed::Indices}},
      {"embedding_no_padding", {[] { return nn::Embedding(4, 2).ptr(); }, Feed::Indices}},
      {"conv1d", {[] {
         return nn::Conv1d(4, 6, 3, nn::Conv1dOptions{.stride = 2, .padding = 1, .groups = 2})
             .ptr();
       }}},
      {"conv1d_dilation_no_bias",
       {[] { return nn::Conv1d(3, 2, 2, nn::Conv1dOptions{.dilation = 3, .bias = false}).ptr(); }}},
      {"conv1d_same_even_kernel",
       {[] { return nn::Conv1d(3, 2, 4, nn::Conv1dOptions{.padding = "same"}).ptr(); }}},
      {"conv1d_valid_unbatched",
       {[] { return nn::Conv1d(2, 3, 3, nn::Conv1dOptions{.padding = "valid"}).ptr(); }}},
      {"conv2d_same_odd_kernel", {[] {
         return nn::Conv2d(2, 3, 3, nn::Conv2dOptions{.padding = "same", .dilation = 2}).ptr();
       }}},
      {"conv2d_same_even_kernel", {[] {
         return nn::Conv2d(2, 3, Size2(2, 4),
                           nn::Conv2dOptions{.padding = "same", .dilation = Size2(1, 2)})
             .ptr();
       }}},
      {"conv2d_same_even_both_groups", {[] {
         return nn::Conv2d(4, 2, Size2(4, 2), nn::Conv2dOptions{.padding = "same", .groups = 2})
             .ptr();
       }}},
      {"conv_transpose2d", {[] {
         return nn::ConvTranspose2d(3, 2, 3, nn::ConvTranspose2dOptions{.stride = 2}).ptr();
       }}},
      {"conv_transpose2d_padding_output_padding", {[] {
         return nn::ConvTranspose2d(4, 6, Size2(3, 2),
                                    nn::ConvTranspose2dOptions{.stride = Size2(2, 3),
                                                               .padding = Size2(1, 0),
                                                               .output_padding = Size2(1, 2),
                                                               .groups = 2})
             .ptr();
       }}},
      {"conv_transpose2d_dilation_no_bias", {[] {
         return nn::ConvTranspose2d(
                    2, 3, 2,
                    nn::ConvTranspose2dOptions{
                        .padding = 1, .output_padding = 1, .bias = false, .dilation = 2})
             .ptr();
       }}},
      {"conv_transpose2d_unbatched", {[] {
         return nn::ConvTranspose2d(2, 2, 2, nn::ConvTranspose2dOptions{.stride = 2}).ptr();
       }}},
      {"adaptive_avg_pool2d", {[] { return nn::AdaptiveAvgPool2d(Size2(3, 4)).ptr(); }}},
      {"adaptive_avg_pool2d_upsample", {[] { return nn::AdaptiveAvgPool2d(Size2(5, 8)).ptr(); }}},
      {"adaptive_avg_pool2d_global_unbatched", {[] { return nn::AdaptiveAvgPool2d(1).ptr(); }}},
      {"max_pool2d_indices",
       {[] { return nn::MaxPool2d(3, nn::MaxPool2dOptions{.stride = 2, .padding = 1}).ptr(); },
        Feed::MaxPoolIndices}},
      {"max_pool2d_indices_dilation_ceil",
       {[] {
          return nn::MaxPool2d(Size2(2, 3), nn::MaxPool2dOptions{.stride = Size2(2, 1),
                                                                 .dilation = Size2(2, 1),
                                                                 .ceil_mode = true})
              .ptr();
        },
        Feed::MaxPoolIndices}},
      {"identity", {[] { return nn::Identity().ptr(); }}},
  };
  return all;
}

// Loads the case's weights (strictly: PyTorch's names and shapes), runs forward and
// (y * gy).sum().backward().
Outputs run_module_case(const std::string& name, const Records& rec) {
  const ModuleCase& mc = module_cases().at(name);
  std::shared_ptr<nn::UnaryModule> m = mc.make();
  m->to(mt::kFloat64);
  nn::StateDict state;
  for (const auto& [n, t] : rec)
    if (n.rfind("in.", 0) == 0 && n != "in.x" && n != "in.gy") state.insert(n.substr(3), t);
  m->load_state_dict(state);

  Outputs out;
  Tensor x = record(rec, "in.x").clone();
  Tensor y;
  if (mc.feed == Feed::Indices) {
    y = m->forward(x.to(mt::kInt64));
  } else {
    x.requires_grad_(true);
    if (mc.feed == Feed::MaxPoolIndices) {
      auto pool = std::dynamic_pointer_cast<nn::MaxPool2dImpl>(m);
      const mt::ValuesIndices vi = pool->forward_with_indices(x);
      EXPECT_EQ(vi.indices.dtype(), mt::kInt64);
      y = vi.values;
      out["indices"] = vi.indices;
    } else {
      y = m->forward(x);
    }
  }
  (y * record(rec, "in.gy")).sum().backward();
  out["y"] = y;
  if (mc.feed != Feed::Indices) out["x.grad"] = x.grad();
  for (const auto& [n, p] : m->named_parameters()) out[n + ".grad"] = p.grad();
  // The inputs come back unchanged, so every record of the case is compared.
  for (const auto& [n, t] : rec)
    if (n.rfind("in.", 0) == 0) out[n] = t;
  return out;
}

class ModulesGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(ModulesGolden, MatchesPyTorch) {
  const auto found = golden().find(GetParam());
  ASSERT_NE(found, golden().end())
      << "no golden record for " << GetParam() << "; rerun scripts/golden/make_modules.py";
  const Outputs out = run_module_case(GetParam(), found->second);
  ASSERT_EQ(out.size(), found->second.size());
  for (const auto& [name, expected] : found->second) {
    ASSERT_TRUE(out.count(name)) << name;
    ASSERT_TRUE(out.at(name).defined()) << name << " is undefined";
    mt::testing::expect_close(out.at(name), expected, 1e-12, 1e-12, GetParam() + ": " + name);
  }
}

std::vector<std::string> module_case_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : module_cases()) names.push_back(name);
  return names;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, ModulesGolden, ::testing::ValuesIn(module_case_names()),
                         [](const auto& info) { return info.param; });

// ---- containers: state_dict names ---------------------------------------------------------

std::shared_ptr<nn::Module> module_list() {
  return nn::ModuleList(nn::Linear(2, 3), nn::Identity(), nn::Conv1d(3, 4, 2), nn::Embedding(5, 2))
      .ptr();
}

std::shared_ptr<nn::Module> module_dict() {
  nn::ModuleDict dict;
  dict->insert("enc", nn::Linear(2, 3));
  dict->insert("emb", nn::Embedding(4, 2));
  dict->insert("blocks", nn::ModuleList(nn::Linear(3, 3), nn::Linear(3, 1, false)));
  dict->insert("up", nn::ConvTranspose2d(2, 1, 2));
  return dict.ptr();
}

const std::map<std::string, std::function<std::shared_ptr<nn::Module>()>>& name_cases() {
  static const std::map<std::string, std::function<std::shared_ptr<nn::Module>()>> all = {
      {"names_module_list", module_list}, {"names_module_dict", module_dict}};
  return all;
}

TEST(ModuleContainers, StateDictNamesMatchPyTorch) {
  for (const auto& [name, make] : name_cases()) {
    SCOPED_TRACE(name);
    const Records& rec = golden().at(name);
    const std::shared_ptr<nn::Module> m = make();
    const nn::StateDict state = m->state_dict();
    ASSERT_EQ(state.size(), rec.size());
    size_t i = 0;
    for (const auto& [key, t] : state) {
      EXPECT_EQ(key, rec[i].first);
      EXPECT_EQ(t.shape(), rec[i].second.shape()) << key;
      ++i;
    }
    // named_parameters sees the same tensors under the same names (no buffers here).
    const auto params = m->named_parameters();
    ASSERT_EQ(params.size(), rec.size());
    for (size_t k = 0; k < params.size(); ++k) EXPECT_EQ(params[k].first, rec[k].first);
    // PyTorch's values load under those names.
    m->to(mt::kFloat64);
    nn::StateDict torch_state;
    for (const auto& [key, t] : rec) torch_state.insert(key, t);
    m->load_state_dict(torch_state);
    for (const auto& [key, t] : rec)
      mt::testing::expect_close(m->state_dict().at(key), t, 0, 0, key);
  }
}

TEST(ModuleContainers, AccessAndErrors) {
  nn::ModuleList list(nn::Linear(2, 3), nn::ReLU());
  EXPECT_EQ(list->size(), 2u);
  ASSERT_NE(list->at<nn::LinearImpl>(0), nullptr);
  EXPECT_EQ(list->at<nn::LinearImpl>(1), nullptr);
  EXPECT_EQ(list->at<nn::LinearImpl>(0)->out_features, 3);
  mt::testing::expect_error([&] { (*list)[2]; }, {"ModuleList", "index 2", "2 modules"});
  size_t visited = 0;
  for (const auto& m : *list) visited += m != nullptr;
  EXPECT_EQ(visited, 2u);

  nn::ModuleDict dict;
  dict->insert("a", nn::Linear(1, 1));
  EXPECT_TRUE(dict->contains("a"));
  EXPECT_FALSE(dict->contains("b"));
  EXPECT_EQ(dict->keys(), std::vector<std::string>{"a"});
  mt::testing::expect_error([&] { (*dict)["b"]; }, {"ModuleDict", "'b'"});
  mt::testing::expect_error([&] { dict->insert("a", nn::Linear(1, 1)); }, {"'a' already exists"});
  mt::testing::expect_error([&] { dict->insert("x.y", nn::Linear(1, 1)); }, {"x.y"});

  // Identity hands back the very tensor it was given.
  Tensor x = mt::ones({2});
  EXPECT_EQ(nn::Identity()(x).unsafe_impl(), x.unsafe_impl());
}

TEST(ModulesGoldenFile, EveryGoldenCaseHasATest) {
  for (const auto& [name, _] : golden()) {
    const bool init = name.rfind("init_", 0) == 0;
    EXPECT_TRUE(module_cases().count(name) || name_cases().count(name) || init) << name;
  }
  for (const auto& [name, _] : module_cases()) EXPECT_TRUE(golden().count(name)) << name;
  for (const auto& [name, _] : name_cases()) EXPECT_TRUE(golden().count(name)) << name;
  for (const char* name : {"init_conv1d", "init_conv_transpose2d"})
    EXPECT_TRUE(golden().count(name)) << name;
}

// ---- initialisation -------------------------------------------------------------------------

double max_abs(const Tensor& t) { return mt::amax(mt::abs(t)).item<double>(); }

void expect_uniform_within(const Tensor& t, double bound, const std::string& what) {
  // Many draws from U(-bound, bound): all inside, and the largest close to the edge.
  EXPECT_LE(max_abs(t), bound) << what;
  EXPECT_GT(max_abs(t), 0.9 * bound) << what;
}

TEST(ModuleInit, ConvolutionBoundsMatchPyTorch) {
  {
    const Records& rec = golden().at("init_conv1d");
    nn::Conv1d m(6, 40, 5, nn::Conv1dOptions{.groups = 2});
    EXPECT_EQ(m->weight.shape(), Shape({40, 3, 5}));
    expect_uniform_within(m->weight, record(rec, "weight_bound").item<double>(), "Conv1d weight");
    expect_uniform_within(m->bias, record(rec, "bias_bound").item<double>(), "Conv1d bias");
  }
  {
    const Records& rec = golden().at("init_conv_transpose2d");
    nn::ConvTranspose2d m(40, 6, mt::Size2(3, 2), nn::ConvTranspose2dOptions{.groups = 2});
    EXPECT_EQ(m->weight.shape(), Shape({40, 3, 3, 2}));
    expect_uniform_within(m->weight, record(rec, "weight_bound").item<double>(),
                          "ConvTranspose2d weight");
    EXPECT_LE(max_abs(m->bias), record(rec, "bias_bound").item<double>());
  }
}

TEST(ModuleInit, EmbeddingIsStandardNormalWithAZeroPaddingRow) {
  nn::Embedding e(400, 50, 7);
  const Tensor w = e->weight.detach();
  EXPECT_EQ(max_abs(w.select(0, 7)), 0.0);
  const double mean = mt::mean(w).item<double>();
  const double var = mt::var(w).item<double>();
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.03);
  EXPECT_EQ(nn::Embedding(5, 2, -2)->padding_idx, 3);
}

// ---- errors, printing --------------------------------------------------------------------

TEST(NnModules, ErrorsNameTheProblem) {
  using mt::testing::expect_error;
  nn::Embedding e(4, 2);
  expect_error(
      [&] {
        e(mt::from_vector(std::vector<int64_t>{0, 4}, Shape{2}));
      },
      {"embedding", "index 4", "size 4"});
  expect_error([&] { e(mt::ones({2})); }, {"embedding", "Long, Int", "float32"});
  expect_error([] { nn::Embedding(4, 2, 4); }, {"Padding_idx", "4"});
  expect_error(
      [] {
        nn::Conv2d(2, 2, 3,
                   nn::Conv2dOptions{.stride = 2, .padding = "same"})(mt::ones({1, 2, 5, 5}));
      },
      {"same", "strided"});
  expect_error([] { nn::Conv2d(2, 2, 3, nn::Conv2dOptions{.padding = "full"}); },
               {"Invalid padding string 'full'"});
  expect_error(
      [] {
        mt::conv_transpose2d(mt::ones({1, 2, 3, 3}), mt::ones({2, 1, 2, 2}), Tensor(), 1, 0, 1);
      },
      {"conv_transpose2d", "output padding must be smaller"});
  expect_error(
      [] {
        mt::conv_transpose2d(mt::ones({1, 3, 3, 3}), mt::ones({2, 1, 2, 2}));
      },
      {"conv_transpose2d", "expected input", "to have 2 channels"});
  expect_error(
      [] {
        nn::AdaptiveAvgPool2d(2)(mt::ones({2, 3}));
      },
      {"adaptive_avg_pool2d", "3D or 4D"});
  expect_error([] { nn::Conv1d(2, 2, 3)(mt::ones({1, 2, 3, 4})); }, {"Conv1d", "2D", "3D"});
}

TEST(NnModules, ReprMatchesPyTorch) {
  EXPECT_EQ(nn::Embedding(10, 3, 0)->repr(), "Embedding(10, 3, padding_idx=0)");
  EXPECT_EQ(nn::Conv1d(4, 6, 3, nn::Conv1dOptions{.stride = 2, .padding = 1, .groups = 2})->repr(),
            "Conv1d(4, 6, kernel_size=(3,), stride=(2,), padding=(1,), groups=2)");
  EXPECT_EQ(nn::Conv2d(2, 3, 3, nn::Conv2dOptions{.padding = "same"})->repr(),
            "Conv2d(2, 3, kernel_size=(3, 3), stride=(1, 1), padding=same)");
  EXPECT_EQ(
      nn::ConvTranspose2d(
          3, 2, 3, nn::ConvTranspose2dOptions{.stride = 2, .output_padding = 1, .bias = false})
          ->repr(),
      "ConvTranspose2d(3, 2, kernel_size=(3, 3), stride=(2, 2), output_padding=(1, 1), "
      "bias=False)");
  EXPECT_EQ(nn::AdaptiveAvgPool2d(mt::Size2(5, 7))->repr(),
            "AdaptiveAvgPool2d(output_size=(5, 7))");
  EXPECT_EQ(nn::Identity()->repr(), "Identity()");
  EXPECT_EQ(nn::ModuleList(nn::Identity())->repr(), "ModuleList(\n  (0): Identity()\n)");
}

}  // namespace

// ---- the config's layer list ----------------------------------------------------------------
namespace {

TEST(NnModulesConfig, Conv1dAdaptivePoolAndIdentityLayersBuildAndInferShapes) {
  namespace rn = mantissa::runner;
  const rn::Config c = rn::parse_config(
      "model:\n  layers:\n    - {type: conv1d, in: 3, out: 4, kernel: 3, stride: 2, padding: 1}\n"
      "    - identity\n    - {type: flatten, start_dim: 1}\n",
      "t");
  EXPECT_EQ(rn::infer_output_shape(c, Shape{3, 9}, "input"), (Shape{20}));
  auto seq = rn::build_model(c.model);
  EXPECT_EQ(seq->forward(mt::randn({2, 3, 9})).shape(), (Shape{2, 20}));
  EXPECT_EQ(seq->state_dict().keys(), (std::vector<std::string>{"0.weight", "0.bias"}));
  EXPECT_EQ(rn::output_key(c.model), "model.layers.0.out");

  const rn::Config p = rn::parse_config(
      "model:\n  layers:\n    - {type: adaptive_avg_pool2d, output_size: [2, 3]}\n"
      "    - {type: adaptive_avg_pool2d, output_size: 1}\n",
      "t");
  EXPECT_EQ(rn::infer_output_shape(p, Shape{2, 7, 5}, "input"), (Shape{2, 1, 1}));
  EXPECT_EQ(rn::build_model(p.model)->forward(mt::randn({4, 2, 7, 5})).shape(),
            (Shape{4, 2, 1, 1}));
  mt::testing::expect_error(
      [&] {
        rn::infer_output_shape(c, Shape{3, 9, 9}, "input");
      },
      {"model.layers.0.in", "[channels, length]"});
  mt::testing::expect_error(
      [] {
        rn::parse_config(
            "model:\n  layers:\n    - {type: adaptive_avg_pool2d, output_size: [1, 2, 3]}\n", "t");
      },
      {"output_size", "one or two sizes"});
}

}  // namespace

// ---- CUDA ---------------------------------------------------------------------------------
namespace {

// Many repeated indices: atomics would add them in a varying order. The sorted backward adds
// each row's gradients in the CPU's order, so runs agree bit for bit, with each other and the
// CPU.
TEST(NnModulesCuda, EmbeddingBackwardIsDeterministicAndMatchesTheCpu) {
  MT_REQUIRE_GPU();
  mt::manual_seed(3);
  const Tensor idx = mt::randint(0, 7, {4096}, mt::kInt64);
  const Tensor w = mt::randn({7, 33});
  const Tensor g = mt::randn({4096, 33});
  auto grad_on = [&](mt::Device device) {
    Tensor wd = w.to(device).requires_grad_(true);
    (mt::embedding(idx.to(device), wd, 5) * g.to(device)).sum().backward();
    return wd.grad().to(mt::kCPU);
  };
  const Tensor cpu = grad_on(mt::kCPU);
  const Tensor first = grad_on(mt::testing::kGpu);
  const Tensor second = grad_on(mt::testing::kGpu);
  mt::testing::expect_close(first, cpu, 0, 0, "cuda vs cpu");
  mt::testing::expect_close(second, first, 0, 0, "cuda run to run");
  EXPECT_EQ(max_abs(first.select(0, 5)), 0.0);
}

TEST(NnModulesCuda, ModulesMatchTheCpu) {
  MT_REQUIRE_GPU();
  for (const char* name : {"conv_transpose2d_padding_output_padding",
                           "adaptive_avg_pool2d_upsample", "conv1d_same_even_kernel"}) {
    SCOPED_TRACE(name);
    const Records& rec = golden().at(name);
    std::shared_ptr<nn::UnaryModule> m = module_cases().at(name).make();
    m->to(mt::testing::kGpu, mt::kFloat64);
    nn::StateDict state;
    for (const auto& [n, t] : rec)
      if (n.rfind("in.", 0) == 0 && n != "in.x" && n != "in.gy") state.insert(n.substr(3), t);
    m->load_state_dict(state);
    Tensor x = record(rec, "in.x").to(mt::testing::kGpu).requires_grad_(true);
    const Tensor y = m->forward(x);
    (y * record(rec, "in.gy").to(mt::testing::kGpu)).sum().backward();
    mt::testing::expect_close(y.to(mt::kCPU), record(rec, "y"), 1e-12, 1e-12, "y");
    mt::testing::expect_close(x.grad().to(mt::kCPU), record(rec, "x.grad"), 1e-12, 1e-12, "x.grad");
  }
}

}  // namespace
