#include "runner/files/gpt_weights.h"

#include <set>
#include <string>

#include "engine/logging.h"

namespace mantissa::runner {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// HF's Conv1D layers, stored [in, out].
bool is_conv1d_weight(std::string_view name) {
  return ends_with(name, ".attn.c_attn.weight") || ends_with(name, ".attn.c_proj.weight") ||
         ends_with(name, ".mlp.c_fc.weight") || ends_with(name, ".mlp.c_proj.weight");
}
// The causal mask buffers: nanoGPT's before PyTorch 2 (attn.bias), HF's (attn.bias,
// attn.masked_bias). A bias parameter is attn.c_attn.bias or attn.c_proj.bias, never attn.bias.
bool is_mask_buffer(std::string_view name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
}

// torch.compile wraps a module as OptimizedModule, whose state dict prefixes every name with
// "_orig_mod." (nanoGPT's train.py compiles by default and saves that state dict).
constexpr std::string_view kCompilePrefix = "_orig_mod.";

std::string_view without_compile_prefix(std::string_view name) {
  return starts_with(name, kCompilePrefix) ? name.substr(kCompilePrefix.size()) : name;
}

const Tensor* find(const NamedTensors& tensors, std::string_view name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return &t;
  return nullptr;
}

[[noreturn]] void not_a_gpt(std::string_view what) {
  MT_THROW("GPT weights in ", what,
           ": no tensor named *.attn.c_attn.weight, so this is not a GPT state dict in the nanoGPT "
           "or Hugging Face layout");
}

}  // namespace

GptLayout parse_gpt_layout(std::string_view name) {
  if (name == "auto") return GptLayout::Auto;
  if (name == "nanogpt") return GptLayout::NanoGPT;
  if (name == "hf") return GptLayout::HuggingFace;
  MT_THROW("GPT weights: unknown layout '", name, "' (expected auto, nanogpt or hf)");
}

std::string_view gpt_layout_name(GptLayout layout) {
  switch (layout) {
    case GptLayout::Auto:
      return "auto";
    case GptLayout::NanoGPT:
      return "nanogpt";
    case GptLayout::HuggingFace:
      return "hf";
  }
  return "?";
}

GptLayout detect_gpt_layout(const NamedTensors& tensors, std::string_view what) {
  for (const auto& [name, t] : tensors) {
    if (!ends_with(name, ".attn.c_attn.weight") || t.dim() != 2) continue;
    if (t.size(0) == 3 * t.size(1)) return GptLayout::NanoGPT;
    if (t.size(1) == 3 * t.size(0)) return GptLayout::HuggingFace;
    MT_THROW("GPT weights in ", what, ": ", name, " has shape ", t.shape(),
             ", neither [3C, C] (nanoGPT) nor [C, 3C] (Hugging Face)");
  }
  not_a_gpt(what);
}

int64_t compile_prefixed_names(const NamedTensors& tensors) {
  int64_t n = 0;
  for (const auto& [name, _] : tensors) n += starts_with(name, kCompilePrefix) ? 1 : 0;
  return n;
}

NamedTensors to_gpt_layout(const NamedTensors& tensors, GptLayout layout, std::string_view what) {
  if (layout == GptLayout::Auto) layout = detect_gpt_layout(tensors, what);
  if (const int64_t prefixed = compile_prefixed_names(tensors); prefixed > 0) {
    log().info("GPT weights in {}: {} names start with torch.compile's \"{}\"; read without it",
               what, prefixed, kCompilePrefix);
  }
  bool has_attention = false;
  for (const auto& [name, _] : tensors) has_attention |= ends_with(name, ".attn.c_attn.weight");
  if (!has_attention) not_a_gpt(what);
  const bool hf = layout == GptLayout::HuggingFace;
  NamedTensors out;
  const Tensor* lm_head = nullptr;
  for (const auto& [full_name, t] : tensors) {
    const std::string name(without_compile_prefix(full_name));
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    std::string key = starts_with(name, "transformer.") ? name : "transformer." + name;
    MT_CHECK(!find(out, key), "GPT weights in ", what, ": ", key, " is given twice (as ", name,
             " and with the other prefix)");
    if (hf && is_conv1d_weight(key)) {
      MT_CHECK(t.dim() == 2, "GPT weights in ", what, ": ", name,
               " (HF Conv1D) should be 2-D, got ", t.shape());
      out.emplace_back(key, t.t().contiguous());
    } else {
      out.emplace_back(key, t);
    }
  }
  if (lm_head && !find(out, "transformer.wte.weight")) {
    // The tied tensor stored once under the output layer's name, as safetensors' save_model
    // writes GPT2LMHeadModel (the other name only in the metadata): it is the token embedding.
    log().info(
        "GPT weights in {}: lm_head.weight without transformer.wte.weight; read as the "
        "tied token embedding",
        what);
    out.emplace_back("transformer.wte.weight", *lm_head);
  } else if (lm_head) {
    const Tensor* wte = find(out, "transformer.wte.weight");
    MT_CHECK(lm_head->shape() == wte->shape() && equal(lm_head->to(wte->dtype()), *wte),
             "GPT weights in ", what,
             ": lm_head.weight differs from transformer.wte.weight, but nn::GPT ties the two (one "
             "tensor); an untied output layer cannot be loaded");
  }
  return out;
}

nn::GPTConfig infer_gpt_config(const NamedTensors& t, nn::GPTConfig c) {
  auto need = [&](const std::string& name) -> const Tensor& {
    const Tensor* p = find(t, name);
    MT_CHECK(p && p->dim() == 2, "GPT weights: no 2-D ", name, " to read the model's shape from");
    return *p;
  };
  c.vocab_size = need("transformer.wte.weight").size(0);
  c.n_embd = need("transformer.wte.weight").size(1);
  c.block_size = need("transformer.wpe.weight").size(0);
  int64_t layers = 0;
  while (find(t, "transformer.h." + std::to_string(layers) + ".attn.c_attn.weight")) ++layers;
  c.n_layer = layers;
  c.bias = find(t, "transformer.h.0.attn.c_attn.bias") != nullptr;
  return c;
}

NamedTensors to_hf_layout(const NamedTensors& nanogpt) {
  NamedTensors out;
  for (const auto& [name, t] : nanogpt) {
    if (name == "lm_head.weight") continue;
    MT_CHECK(starts_with(name, "transformer."), "GPT weights: ", name,
             " is not a name of nn::GPT's state dict");
    out.emplace_back(name, is_conv1d_weight(name) ? t.t().contiguous() : t);
  }
  return out;
}

void add_tied_lm_head(NamedTensors& converted) {
  if (const Tensor* wte = find(converted, "transformer.wte.weight")) {
    const Tensor tied = *wte;
    converted.emplace_back("lm_head.weight", tied);
  }
}

LoadWeightsReport load_gpt_weights(nn::GPTImpl& model, const SafetensorsFile& file,
                                   GptLayout layout) {
  SafetensorsFile converted;
  converted.metadata = file.metadata;
  converted.tensors = to_gpt_layout(file.tensors, layout, "the file");
  // The tied output layer is the token embedding: load_weights fills both names from it.
  add_tied_lm_head(converted.tensors);
  return load_weights(model, converted, /*strict=*/true);
}

}  // namespace mantissa::runner
