// Hugging Face GPT-2 both ways, against transformers 5.x (scripts/fixtures/make_hf_gpt2_fixture.py
// wrote tests/data/hf_gpt2/ with save_pretrained: config.json with gelu_new and
// layer_norm_epsilon 1e-3, model.safetensors, and transformers' logits): config.json read beside
// the weights gives transformers' logits; the HF layout written back has exactly the names, shapes
// and config that save_pretrained writes, and reads back to the same logits; configs nn::GPT
// cannot be are refused by key.
#include <filesystem>
#include <fstream>

#include "runner/files/gpt_weights.h"
#include "runner/files/hf_gpt2_config.h"
#include "test_util.h"

namespace mt = mantissa;
namespace rn = mantissa::runner;
namespace fs = std::filesystem;
using mt::Tensor;

namespace {

std::string fixture(const std::string& name) {
  const char* root = std::getenv("MANTISSA_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/data/hf_gpt2/" + name;
}

Tensor logits_of(mt::nn::GPT& model, const Tensor& idx) {
  model->eval();
  mt::autograd::NoGradGuard no_grad;
  return model(idx);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST(HfGpt2, ConfigJsonBesideTheWeightsGivesTransformersLogits) {
  const auto hf = rn::read_hf_gpt2_config_beside(fixture("model.safetensors"));
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->activation_function, "gelu_new");
  EXPECT_EQ(hf->gpt.activation, "gelu_tanh");
  EXPECT_EQ(hf->gpt.layer_norm_eps, 1e-3);
  EXPECT_EQ(hf->gpt.n_head, 2);
  EXPECT_EQ(hf->gpt.block_size, 8);
  const auto ref = rn::load_safetensors(fixture("logits.safetensors"));
  mt::nn::GPT model(hf->gpt);
  rn::load_gpt_weights(*model, rn::load_safetensors(fixture("model.safetensors")));
  mt::testing::expect_close(logits_of(model, ref.at("idx")), ref.at("logits"), 1e-5, 1e-5);
  // nanoGPT's numerics (exact GELU, epsilon 1e-5) on the same weights are visibly off: both keys
  // matter.
  for (int which = 0; which < 2; ++which) {
    mt::nn::GPTConfig c = hf->gpt;
    if (which == 0) c.activation = "gelu";
    if (which == 1) c.layer_norm_eps = 1e-5;
    mt::nn::GPT other(c);
    rn::load_gpt_weights(*other, rn::load_safetensors(fixture("model.safetensors")));
    EXPECT_GT(mt::max(mt::abs(logits_of(other, ref.at("idx")) - ref.at("logits"))).item<double>(),
              1e-4)
        << which;
  }
  EXPECT_FALSE(
      rn::read_hf_gpt2_config_beside(fs::temp_directory_path() / "no_such_dir" / "w").has_value());
}

// What `mantissa export --layout hf` writes: save_pretrained's tensor names and shapes, exactly,
// a config.json with the fixture's model keys, and a round trip to the same logits.
TEST(HfGpt2, ExportedLayoutIsSavePretrainedsAndReadsBack) {
  const auto hf = rn::read_hf_gpt2_config_beside(fixture("model.safetensors"));
  ASSERT_TRUE(hf.has_value());
  const auto original = rn::load_safetensors(fixture("model.safetensors"));
  mt::nn::GPT model(hf->gpt);
  rn::load_gpt_weights(*model, original);
  rn::NamedTensors state;
  for (const auto& [name, t] : model->state_dict()) state.emplace_back(name, t);
  const rn::NamedTensors exported = rn::to_hf_layout(state);
  ASSERT_EQ(exported.size(), original.tensors.size());
  for (const auto& [name, t] : exported) {
    const Tensor* want = original.find(name);
    ASSERT_NE(want, nullptr) << name << " is not a name save_pretrained writes";
    EXPECT_TRUE(mt::equal(t, *want)) << name;
  }
  const std::string config = rn::hf_gpt2_config_json(model->config());
  const rn::HfGpt2Config back = rn::parse_hf_gpt2_config(config, "exported config.json");
  const rn::HfGpt2Config fixture_config =
      rn::parse_hf_gpt2_config(read_text(fixture("config.json")), "fixture");
  EXPECT_EQ(back.activation_function, "gelu_new");
  EXPECT_EQ(back.gpt.activation, fixture_config.gpt.activation);
  EXPECT_EQ(back.gpt.layer_norm_eps, fixture_config.gpt.layer_norm_eps);
  EXPECT_EQ(back.gpt.n_head, fixture_config.gpt.n_head);
  EXPECT_EQ(back.gpt.block_size, fixture_config.gpt.block_size);
  EXPECT_NE(config.find("\"GPT2LMHeadModel\""), std::string::npos) << config;
  EXPECT_NE(config.find("\"model_type\": \"gpt2\""), std::string::npos) << config;

  const fs::path dir = fs::temp_directory_path() / "mantissa_hf_export";
  fs::remove_all(dir);
  fs::create_directories(dir);
  rn::save_safetensors((dir / "model.safetensors").string(), exported, {{"format", "pt"}});
  std::ofstream((dir / "config.json").string()) << config;
  const auto reread = rn::read_hf_gpt2_config_beside((dir / "model.safetensors").string());
  ASSERT_TRUE(reread.has_value());
  mt::nn::GPT again(reread->gpt);
  rn::load_gpt_weights(*again, rn::load_safetensors((dir / "model.safetensors").string()));
  const auto ref = rn::load_safetensors(fixture("logits.safetensors"));
  mt::testing::expect_close(logits_of(again, ref.at("idx")), ref.at("logits"), 1e-5, 1e-5);
  fs::remove_all(dir);

  mt::nn::GPTConfig nobias = hf->gpt;
  nobias.bias = false;
  mt::testing::expect_error([&] { rn::hf_gpt2_config_json(nobias); },
                            {"bias: false has no GPT-2 layout"});
}

TEST(HfGpt2, ConfigsNnGptCannotBeAreRefusedByKey) {
  const std::string base =
      R"({"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "n_positions": 8, )"
      R"("vocab_size": 32)";
  const auto parse = [&](const std::string& extra) {
    return rn::parse_hf_gpt2_config(base + extra + "}", "c.json");
  };
  EXPECT_EQ(parse("").gpt.activation, "gelu_tanh");  // GPT2Config's default is gelu_new
  EXPECT_EQ(parse(R"(, "activation_function": "gelu")").gpt.activation, "gelu");
  EXPECT_EQ(parse(R"(, "activation_function": "gelu_pytorch_tanh")").gpt.activation, "gelu_tanh");
  EXPECT_EQ(parse(R"(, "n_inner": 64)").gpt.n_embd, 16);
  mt::testing::expect_error([&] { parse(R"(, "activation_function": "relu")"); },
                            {"c.json", "activation_function \"relu\""});
  mt::testing::expect_error([&] { parse(R"(, "n_inner": 32)"); }, {"c.json", "n_inner is 32"});
  mt::testing::expect_error([&] { parse(R"(, "scale_attn_by_inverse_layer_idx": true)"); },
                            {"c.json", "scale_attn_by_inverse_layer_idx is true"});
  mt::testing::expect_error([&] { parse(R"(, "layer_norm_epsilon": 0)"); },
                            {"c.json", "layer_norm_epsilon must be positive"});
  mt::testing::expect_error(
      [&] { rn::parse_hf_gpt2_config(R"({"model_type": "llama", "n_layer": 2})", "c.json"); },
      {"c.json", "model_type is \"llama\""});
  mt::testing::expect_error([&] { rn::parse_hf_gpt2_config(R"({"n_layer": 2})", "c.json"); },
                            {"c.json", "n_head"});
  mt::testing::expect_error([&] { rn::parse_hf_gpt2_config("[1]", "c.json"); },
                            {"c.json", "JSON object"});
  // Its shape must be the weights'.
  rn::HfGpt2Config h = parse("");
  mt::nn::GPTConfig w = h.gpt;
  w.n_layer = 3;
  mt::testing::expect_error([&] { rn::check_hf_gpt2_config_matches(h, w); },
                            {"c.json", "n_layer is 2", "weights beside it have 3"});
}
