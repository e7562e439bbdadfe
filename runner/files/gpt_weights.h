// GPT weights from and to PyTorch: nanoGPT's state dicts and Hugging Face's GPT-2 layout, read
// from safetensors into nn::GPT's names and layout (which are nanoGPT's). Writing needs nothing
// here: save_weights(gpt, path) writes the state dict, which has both transformer.wte.weight and
// lm_head.weight, so nanoGPT's GPT.load_state_dict(strict=True) accepts the file.
//
//   nanoGPT   transformer.h.0.attn.c_attn.weight [3C, C]  (nn.Linear: [out, in]), lm_head.weight
//             a tied copy of transformer.wte.weight, older versions with an attn.bias mask buffer
//   HF        h.0.attn.c_attn.weight [C, 3C] (Conv1D: [in, out]), with or without the
//             "transformer." prefix (GPT2Model / GPT2LMHeadModel), attn.bias and attn.masked_bias
//             buffers, lm_head.weight usually absent
#pragma once

#include <string>
#include <string_view>

#include "nn/transformer.h"
#include "runner/files/safetensors.h"

namespace mantissa::runner {

enum class GptLayout { Auto, NanoGPT, HuggingFace };
// "auto", "nanogpt" or "hf".
GptLayout parse_gpt_layout(std::string_view name);
std::string_view gpt_layout_name(GptLayout layout);

// Which layout the tensors are in, from the first c_attn weight's shape ([3C, C]: nanoGPT,
// [C, 3C]: HF). Throws, naming `what`, when there is no c_attn weight to tell.
GptLayout detect_gpt_layout(const NamedTensors& tensors, std::string_view what);

// How many names carry torch.compile's "_orig_mod." prefix (a compiled model's state dict, as
// nanoGPT's train.py saves by default); to_gpt_layout reads them without it.
int64_t compile_prefixed_names(const NamedTensors& tensors);

// The tensors renamed and transposed into nn::GPT's (nanoGPT's) names and layout: a leading
// "_orig_mod." dropped (and logged), the "transformer." prefix added where missing, Conv1D weights
// (c_attn, c_proj, c_fc) transposed for HF, the attention mask buffers (attn.bias,
// attn.masked_bias) dropped, and lm_head.weight dropped once checked equal to the token embedding
// (a different one is an error naming the key: nn::GPT ties the two), or taken as the token
// embedding when that is absent (the tied tensor stored once, as safetensors.torch.save_model
// writes it). Auto detects the layout.
NamedTensors to_gpt_layout(const NamedTensors& tensors, GptLayout layout, std::string_view what);

// The GPTConfig the converted tensors describe (n_layer, n_embd, vocab_size, block_size, bias);
// n_head and dropout cannot be read from weights and come from `base`.
nn::GPTConfig infer_gpt_config(const NamedTensors& converted, nn::GPTConfig base);

// nn::GPT's state dict (nanoGPT's names and layout) in GPT2LMHeadModel's, for
// from_pretrained: the names as they are ("transformer." included), the Conv1D weights (c_attn,
// c_proj, c_fc) transposed to [in, out], lm_head.weight left out (transformers ties it to
// transformer.wte.weight, as its save_pretrained leaves it out).
NamedTensors to_hf_layout(const NamedTensors& nanogpt);

// Appends lm_head.weight as the token embedding (transformer.wte.weight), as nanoGPT's tied state
// dict holds it under both names; nothing when there is no embedding.
void add_tied_lm_head(NamedTensors& converted);

// Loads a nanoGPT or HF state dict into `model`: every parameter must be given, nothing else
// (after the conversion above); shapes must match. Nothing is modified when it throws.
LoadWeightsReport load_gpt_weights(nn::GPTImpl& model, const SafetensorsFile& file,
                                   GptLayout layout = GptLayout::Auto);

}  // namespace mantissa::runner
