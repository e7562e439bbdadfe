// GPT weights written by PyTorch (scripts/fixtures/make_gpt_fixtures.py): a nanoGPT state dict
// (with and without biases) and the same weights in Hugging Face's GPT-2 layout load into nn::GPT
// and give PyTorch's logits; what nn::GPT writes reads back the same.
#include <filesystem>

#include "runner/config/config.h"
#include "runner/files/gpt_weights.h"
#include "runner/training/model_builder.h"
#include "test_models.h"
#include "test_util.h"

namespace mt = mantissa;
namespace rn = mantissa::runner;
using mt::Tensor;

namespace {

std::string data_path(const std::string& name) {
  const char* root = std::getenv("MANTISSA_SOURCE_DIR");
  return std::string(root ? root : ".") + "/tests/data/" + name;
}

mt::nn::GPTConfig fixture_config(bool bias = true) {
  return mt::testing::tiny_gpt_config(0.0, bias);
}

const rn::SafetensorsFile& logits_file() {
  static const rn::SafetensorsFile f = rn::load_safetensors(data_path("gpt_logits.safetensors"));
  return f;
}

Tensor logits_of(mt::nn::GPT& model) {
  model->eval();
  mt::autograd::NoGradGuard no_grad;
  return model(logits_file().at("idx"));
}

rn::NamedTensors without(const rn::NamedTensors& t, const std::string& name) {
  rn::NamedTensors out;
  for (const auto& [n, v] : t)
    if (n != name) out.emplace_back(n, v);
  return out;
}

}  // namespace

TEST(GPTInterop, NanoGPTStateDictGivesPyTorchsLogits) {
  const auto file = rn::load_safetensors(data_path("gpt_nanogpt.safetensors"));
  ASSERT_TRUE(file.find("lm_head.weight"));  // nanoGPT's state_dict has the tied copy
  EXPECT_EQ(rn::detect_gpt_layout(file.tensors, "f"), rn::GptLayout::NanoGPT);
  mt::nn::GPT model(fixture_config());
  rn::load_gpt_weights(*model, file);
  mt::testing::expect_close(logits_of(model), logits_file().at("logits"), 1e-5, 1e-5);
}

TEST(GPTInterop, NanoGPTWithoutBiases) {
  const auto file = rn::load_safetensors(data_path("gpt_nanogpt_nobias.safetensors"));
  mt::nn::GPT model(fixture_config(/*bias=*/false));
  rn::load_gpt_weights(*model, file, rn::GptLayout::NanoGPT);
  mt::testing::expect_close(logits_of(model), logits_file().at("logits_nobias"), 1e-5, 1e-5);
  // A model with biases misses them, and the error names them.
  mt::nn::GPT with_bias(fixture_config(true));
  mt::testing::expect_error([&] { rn::load_gpt_weights(*with_bias, file); },
                            {"missing", "transformer.h.0.attn.c_attn.bias"});
}

TEST(GPTInterop, HuggingFaceLayoutGivesTheSameLogits) {
  const auto file = rn::load_safetensors(data_path("gpt_hf.safetensors"));
  ASSERT_TRUE(file.find("h.0.attn.bias"));  // the mask buffers are there, and ignored
  ASSERT_FALSE(file.find("lm_head.weight"));
  EXPECT_EQ(rn::detect_gpt_layout(file.tensors, "f"), rn::GptLayout::HuggingFace);
  EXPECT_EQ(file.at("h.0.attn.c_attn.weight").shape(), (mt::Shape{16, 48}));  // Conv1D [in, out]
  for (auto layout : {rn::GptLayout::Auto, rn::GptLayout::HuggingFace}) {
    mt::nn::GPT model(fixture_config());
    rn::load_gpt_weights(*model, file, layout);
    mt::testing::expect_close(logits_of(model), logits_file().at("logits"), 1e-5, 1e-5);
  }
  // GPT2LMHeadModel's keys carry "transformer." and may repeat the tied lm_head.
  rn::SafetensorsFile prefixed;
  for (const auto& [n, t] : file.tensors) prefixed.tensors.emplace_back("transformer." + n, t);
  prefixed.tensors.emplace_back("lm_head.weight", file.at("wte.weight").clone());
  mt::nn::GPT model(fixture_config());
  rn::load_gpt_weights(*model, prefixed);
  mt::testing::expect_close(logits_of(model), logits_file().at("logits"), 1e-5, 1e-5);
  // Read as nanoGPT's layout, the [in, out] weights do not fit.
  mt::nn::GPT wrong(fixture_config());
  mt::testing::expect_error([&] { rn::load_gpt_weights(*wrong, file, rn::GptLayout::NanoGPT); },
                            {"size mismatch", "transformer.h.0.attn.c_attn.weight"});
}

// A compiled model's state dict (torch.compile, nanoGPT's default) prefixes every name with
// "_orig_mod.": read without it, in either layout, and counted for the user.
TEST(GPTInterop, TorchCompilePrefixIsStripped) {
  for (const char* name : {"gpt_nanogpt.safetensors", "gpt_hf.safetensors"}) {
    const auto file = rn::load_safetensors(data_path(name));
    rn::SafetensorsFile compiled;
    for (const auto& [n, t] : file.tensors) compiled.tensors.emplace_back("_orig_mod." + n, t);
    EXPECT_EQ(rn::compile_prefixed_names(compiled.tensors),
              static_cast<int64_t>(file.tensors.size()));
    EXPECT_EQ(rn::compile_prefixed_names(file.tensors), 0);
    mt::nn::GPT model(fixture_config());
    rn::load_gpt_weights(*model, compiled);
    mt::testing::expect_close(logits_of(model), logits_file().at("logits"), 1e-5, 1e-5, name);
  }
}

TEST(GPTInterop, TiedLmHead) {
  const auto file = rn::load_safetensors(data_path("gpt_nanogpt.safetensors"));
  // Missing: accepted (it is the token embedding).
  rn::SafetensorsFile no_head;
  no_head.tensors = without(file.tensors, "lm_head.weight");
  mt::nn::GPT a(fixture_config());
  rn::load_gpt_weights(*a, no_head);
  mt::testing::expect_close(logits_of(a), logits_file().at("logits"), 1e-5, 1e-5);
  EXPECT_TRUE(mt::equal(a->lm_head->weight, file.at("transformer.wte.weight")));
  // Stored once under lm_head.weight, the embedding's name only in the metadata (what
  // safetensors.torch.save_model writes for GPT2LMHeadModel, here in either layout): accepted.
  for (const char* fixture : {"gpt_nanogpt.safetensors", "gpt_hf.safetensors"}) {
    SCOPED_TRACE(fixture);
    const auto f = rn::load_safetensors(data_path(fixture));
    rn::SafetensorsFile once;
    for (const auto& [n, t] : without(f.tensors, "lm_head.weight")) {
      // GPT2LMHeadModel's names carry "transformer." in the HF layout too.
      const std::string name = n.rfind("transformer.", 0) == 0 ? n : "transformer." + n;
      if (name == "transformer.wte.weight")
        once.tensors.emplace_back("lm_head.weight", t);
      else
        once.tensors.emplace_back(name, t);
    }
    ASSERT_TRUE(once.find("lm_head.weight"));
    ASSERT_FALSE(once.find("transformer.wte.weight"));
    once.metadata = {{"format", "pt"}, {"transformer.wte.weight", "lm_head.weight"}};
    mt::nn::GPT m(fixture_config());
    rn::load_gpt_weights(*m, once);
    mt::testing::expect_close(logits_of(m), logits_file().at("logits"), 1e-5, 1e-5);
  }
  // Different: refused, naming the key, and the model is left as it was.
  rn::SafetensorsFile untied;
  untied.tensors = without(file.tensors, "lm_head.weight");
  Tensor head = file.at("lm_head.weight").clone();
  head.select(0, 3).select(0, 5).fill_(0.5);
  untied.tensors.emplace_back("lm_head.weight", head);
  mt::nn::GPT b(fixture_config());
  const Tensor before = b->wte->weight.clone();
  mt::testing::expect_error([&] { rn::load_gpt_weights(*b, untied); },
                            {"lm_head.weight differs from transformer.wte.weight"});
  EXPECT_TRUE(mt::equal(b->wte->weight, before));
}

TEST(GPTInterop, RefusesWhatIsNotAGPT) {
  rn::NamedTensors t = {{"0.weight", mt::zeros({2, 2})}};
  mt::testing::expect_error([&] { rn::detect_gpt_layout(t, "x.safetensors"); },
                            {"x.safetensors", "attn.c_attn.weight"});
  rn::NamedTensors odd = {{"h.0.attn.c_attn.weight", mt::zeros({4, 5})}};
  mt::testing::expect_error([&] { rn::detect_gpt_layout(odd, "y"); }, {"[4, 5]", "[3C, C]"});
  mt::testing::expect_error([&] { rn::parse_gpt_layout("gpt2"); }, {"'gpt2'", "nanogpt"});
}

TEST(GPTInterop, InfersTheShapeFromTheWeights) {
  const auto file = rn::load_safetensors(data_path("gpt_hf.safetensors"));
  mt::nn::GPTConfig base;
  base.n_head = 2;
  const auto c =
      rn::infer_gpt_config(rn::to_gpt_layout(file.tensors, rn::GptLayout::Auto, "f"), base);
  const auto want = fixture_config();
  EXPECT_EQ(c.block_size, want.block_size);
  EXPECT_EQ(c.vocab_size, want.vocab_size);
  EXPECT_EQ(c.n_layer, want.n_layer);
  EXPECT_EQ(c.n_embd, want.n_embd);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_TRUE(c.bias);
  const auto nobias = rn::load_safetensors(data_path("gpt_nanogpt_nobias.safetensors"));
  EXPECT_FALSE(
      rn::infer_gpt_config(rn::to_gpt_layout(nobias.tensors, rn::GptLayout::Auto, "f"), base).bias);
}

// What nn::GPT writes has nanoGPT's keys, lm_head included (PyTorch's strict load needs it), and
// reads back into the same logits.
TEST(GPTInterop, ExportReadsBack) {
  mt::nn::GPT model(fixture_config());
  rn::load_gpt_weights(*model, rn::load_safetensors(data_path("gpt_hf.safetensors")));
  const auto path = std::filesystem::temp_directory_path() / "mantissa_gpt_export.safetensors";
  rn::save_weights(*model, path.string());
  const auto written = rn::load_safetensors(path.string());
  const auto nano = rn::load_safetensors(data_path("gpt_nanogpt.safetensors"));
  EXPECT_EQ(written.names(), nano.names());
  for (const auto& [name, t] : nano.tensors) EXPECT_TRUE(mt::equal(written.at(name), t)) << name;
  mt::nn::GPT back(fixture_config());
  rn::load_gpt_weights(*back, written);
  EXPECT_TRUE(mt::equal(logits_of(back), logits_of(model)));
  std::filesystem::remove(path);
}

// ---- the `gpt` model preset of run configs --------------------------------------------------

namespace {
const char* kGptConfig =
    "model:\n  preset: gpt\n  n_layer: 2\n  n_head: 2\n  n_embd: 16\n  block_size: 8\n"
    "  vocab_size: 32\n";
}

TEST(GPTPreset, BuildsNanoGPTsModelAndLoadsEitherLayout) {
  const rn::Config c = rn::parse_config(kGptConfig, "gpt.yaml");
  EXPECT_EQ(c.model.preset, "gpt");
  EXPECT_EQ(c.model.gpt.n_embd, 16);
  EXPECT_TRUE(c.model.gpt.bias);
  const auto model = rn::build_run_model(c.model);
  auto gpt = std::dynamic_pointer_cast<mt::nn::GPTImpl>(model);
  ASSERT_TRUE(gpt);
  EXPECT_EQ(gpt->config().n_layer, 2);
  EXPECT_EQ(gpt->config().vocab_size, 32);
  EXPECT_EQ(model->named_parameters().front().first, "transformer.wte.weight");
  for (const char* file : {"gpt_hf.safetensors", "gpt_nanogpt.safetensors"}) {
    rn::load_model_weights(*model, data_path(file));
    mt::nn::GPT handle(gpt);
    mt::testing::expect_close(logits_of(handle), logits_file().at("logits"), 1e-5, 1e-5);
  }
  // One example of 8 token ids gives 8 rows of 32 logits; a longer one does not fit.
  EXPECT_EQ(rn::infer_output_shape(c, mt::Shape{8}, "input"), (mt::Shape{8, 32}));
  try {
    rn::infer_output_shape(c, mt::Shape{9}, "data input shape [9]");
    ADD_FAILURE() << "expected a config error";
  } catch (const rn::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.block_size"), std::string::npos) << e.what();
  }
}

TEST(GPTPreset, KeysRoundTripAndApplyToGptOnly) {
  rn::Config c =
      rn::parse_config(std::string(kGptConfig) + "  dropout: 0.1\n  bias: false\n", "gpt.yaml");
  const std::string text = rn::to_yaml(c);
  EXPECT_NE(text.find("  n_head: 2\n"), std::string::npos) << text;
  const rn::Config back = rn::parse_config(text, "resolved.yaml");
  EXPECT_EQ(rn::to_yaml(back), text);
  EXPECT_EQ(back.model.gpt.dropout, 0.1);
  EXPECT_FALSE(back.model.gpt.bias);
  // The toy preset's resolved config has none of them, and refuses them.
  EXPECT_EQ(rn::to_yaml(rn::parse_config("", "t")).find("n_head"), std::string::npos);
  EXPECT_THROW(rn::parse_config("model:\n  preset: toy\n  n_head: 2\n", "t"), rn::ConfigError);
  try {
    rn::parse_config("model:\n  preset: gpt\n  n_head: 3\n  n_embd: 16\n", "t");
    ADD_FAILURE() << "expected a config error";
  } catch (const rn::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.n_head"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must divide n_embd"), std::string::npos) << e.what();
  }
}
