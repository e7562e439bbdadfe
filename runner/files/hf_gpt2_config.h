// Hugging Face GPT-2's config.json (transformers' GPT2Config), read beside a weights file and
// written beside an export: the model's shape and the numerics its weights were trained with
// (activation_function, layer_norm_epsilon), which the weights themselves do not carry.
//
//   n_layer, n_head, n_embd       nn::GPTConfig's
//   n_positions                   block_size
//   vocab_size                    vocab_size
//   activation_function           "gelu_new" / "gelu_pytorch_tanh" -> gelu_tanh, "gelu" -> gelu
//   layer_norm_epsilon            layer_norm_eps
//   n_inner                       null or 4 n_embd (nn::GPT's MLP width)
//   scale_attn_weights            true (attention scaled by 1/sqrt(head dim), as nn::GPT)
//   scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn: false
// Anything else nn::GPT cannot be (another model_type, another activation, another MLP width or
// attention scaling) is refused, naming the key.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "nn/transformer.h"

namespace mantissa::runner {

struct HfGpt2Config {
  nn::GPTConfig gpt;                // bias true; dropout 0 (the config's are for training)
  std::string activation_function;  // as the file names it
  std::string path;                 // the file read
};

// Parses config.json's text; `what` names it in errors.
HfGpt2Config parse_hf_gpt2_config(std::string_view text, const std::string& what);

// The config.json in the directory of `weights_path`, or nullopt when there is none.
std::optional<HfGpt2Config> read_hf_gpt2_config_beside(const std::string& weights_path);

// Throws unless the config's shape is that of `weights` (what infer_gpt_config read from the
// weights beside it), naming the key and both values.
void check_hf_gpt2_config_matches(const HfGpt2Config& hf, const nn::GPTConfig& weights);

// config.json for GPT2LMHeadModel.from_pretrained with the model `c` describes (dropout 0).
// Throws for a model GPT-2 cannot be: without biases.
std::string hf_gpt2_config_json(const nn::GPTConfig& c);

}  // namespace mantissa::runner
