// Text from a byte-level GPT: the prompt's bytes, then sampled tokens, decoded by the byte
// tokenizer (runner/tokenizer.h) — what `mantissa generate` prints.
//
//   nn::GPT model(nn::GPTConfig{.block_size = 128, .vocab_size = 256, ...});
//   std::string text = runner::generate_text(*model, {.prompt = "ROMEO:", .tokens = 200,
//                                                     .top_k = 40, .seed = 1});
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/transformer.h"

namespace mantissa::runner {

struct GenerateOptions {
  std::string prompt{};  // empty: "\n", as nanoGPT's sample.py starts
  int64_t tokens = 256;  // new tokens after the prompt
  double temperature = 1.0;
  std::optional<int64_t> top_k{};
  uint64_t seed = 0;
};

// The prompt followed by `tokens` sampled bytes, in eval mode (no dropout) and with the KV cache;
// the same options give the same text. The model's vocabulary must be at least 256 and may not
// produce an id above 255 (one that does is an error naming it: the model was not trained on
// bytes). The model's mode is restored.
std::string generate_text(nn::GPTImpl& model, const GenerateOptions& options);

}  // namespace mantissa::runner
