#include "runner/files/hf_gpt2_config.h"

#include <filesystem>

#include "engine/error.h"
#include "runner/files/atomic_file.h"
#include "runner/files/json.h"

namespace mantissa::runner {
namespace {

namespace fs = std::filesystem;

int64_t positive_int(const JsonView& j, std::string_view key, const std::string& what) {
  const int64_t v = j.at(key).as_int();
  MT_CHECK(v > 0, what, ": ", key, " must be a positive integer, got ", v);
  return v;
}

}  // namespace

HfGpt2Config parse_hf_gpt2_config(std::string_view text, const std::string& what) {
  const Json tree = json::parse(text, what);
  const JsonView j(tree);
  MT_CHECK(j.is_object(), what, ": expected a JSON object (a transformers GPT2Config)");
  HfGpt2Config h;
  h.path = what;
  try {
    if (const auto type = j.find("model_type"))
      MT_CHECK(type->as_string() == "gpt2", what, ": model_type is \"", type->as_string(),
               "\", but only GPT-2's (\"gpt2\") maps onto nn::GPT");
    nn::GPTConfig& c = h.gpt;
    c.n_layer = positive_int(j, "n_layer", what);
    c.n_head = positive_int(j, "n_head", what);
    c.n_embd = positive_int(j, "n_embd", what);
    c.block_size = positive_int(j, "n_positions", what);
    c.vocab_size = positive_int(j, "vocab_size", what);
    c.bias = true;
    c.dropout = 0.0;
    h.activation_function = j.find("activation_function")
                                ? j.at("activation_function").as_string()
                                : std::string("gelu_new");  // GPT2Config's default
    if (h.activation_function == "gelu_new" || h.activation_function == "gelu_pytorch_tanh") {
      c.activation = "gelu_tanh";
    } else if (h.activation_function == "gelu") {
      c.activation = "gelu";
    } else {
      MT_THROW(what, ": activation_function \"", h.activation_function,
               "\" is not one nn::GPT has (gelu_new, gelu_pytorch_tanh: gelu_tanh; gelu)");
    }
    if (const auto eps = j.find("layer_norm_epsilon")) {
      c.layer_norm_eps = eps->as_double();
      MT_CHECK(c.layer_norm_eps > 0, what, ": layer_norm_epsilon must be positive, got ",
               c.layer_norm_eps);
    }
    if (const auto inner = j.find("n_inner"); inner && !inner->is_null()) {
      const int64_t n = inner->as_int();
      MT_CHECK(n % 4 == 0 && n / 4 == c.n_embd, what, ": n_inner is ", n,
               ", but nn::GPT's MLP is 4 * n_embd wide (n_embd ", c.n_embd, ")");
    }
    const auto flag = [&](std::string_view key, bool want) {
      if (const auto v = j.find(key))
        MT_CHECK(v->as_bool() == want, what, ": ", key, " is ", v->as_bool() ? "true" : "false",
                 ", which nn::GPT's attention does not do");
    };
    flag("scale_attn_weights", true);
    flag("scale_attn_by_inverse_layer_idx", false);
    flag("reorder_and_upcast_attn", false);
    MT_CHECK(c.n_embd % c.n_head == 0, what, ": n_embd (", c.n_embd,
             ") is not a multiple of n_head (", c.n_head, ")");
  } catch (const Error& e) {
    const std::string m = e.what();
    if (m.rfind(what, 0) == 0) throw;
    throw Error(what + ": " + m);  // a JsonView error: the key's kind
  }
  return h;
}

std::optional<HfGpt2Config> read_hf_gpt2_config_beside(const std::string& weights_path) {
  const fs::path config = fs::path(weights_path).parent_path() / "config.json";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return std::nullopt;
  return parse_hf_gpt2_config(read_file_bytes(config.string()), config.string());
}

void check_hf_gpt2_config_matches(const HfGpt2Config& hf, const nn::GPTConfig& w) {
  const auto same = [&](const char* key, int64_t config, int64_t weights) {
    MT_CHECK(config == weights, hf.path, ": ", key, " is ", config, ", but the weights beside it ",
             "have ", weights);
  };
  same("n_layer", hf.gpt.n_layer, w.n_layer);
  same("n_embd", hf.gpt.n_embd, w.n_embd);
  same("n_positions", hf.gpt.block_size, w.block_size);
  same("vocab_size", hf.gpt.vocab_size, w.vocab_size);
}

std::string hf_gpt2_config_json(const nn::GPTConfig& c) {
  MT_CHECK(c.bias,
           "Hugging Face GPT-2 has biases in every Linear and LayerNorm layer; a model "
           "with bias: false has no GPT-2 layout (export it in nanoGPT's)");
  Json j = Json::object();
  j["architectures"] = Json::array({"GPT2LMHeadModel"});
  j["model_type"] = "gpt2";
  j["n_layer"] = c.n_layer;
  j["n_head"] = c.n_head;
  j["n_embd"] = c.n_embd;
  j["n_positions"] = c.block_size;
  j["n_ctx"] = c.block_size;
  j["vocab_size"] = c.vocab_size;
  j["n_inner"] = nullptr;
  j["activation_function"] = c.activation == "gelu_tanh" ? "gelu_new" : "gelu";
  j["layer_norm_epsilon"] = c.layer_norm_eps;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["scale_attn_weights"] = true;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = true;
  // GPT2Config's default <|endoftext|> id is 50256, outside a smaller vocabulary (transformers
  // warns on loading): none then.
  if (c.vocab_size <= 50256) {
    j["bos_token_id"] = nullptr;
    j["eos_token_id"] = nullptr;
  }
  return json::dump(j, 2) + "\n";
}

}  // namespace mantissa::runner
