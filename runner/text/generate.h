// Text from a GPT: the prompt's tokens, then sampled ones, decoded by the byte tokenizer
// (runner/text/tokenizer.h) or by the run's BPE tokenizer (runner/text/bpe_tokenizer.h) — what
// `mantissa generate` prints.
//
//   nn::GPT model(nn::GPTConfig{.block_size = 128, .vocab_size = 256, ...});
//   std::string text = runner::generate_text(*model, {.prompt = "ROMEO:", .tokens = 200,
//                                                     .top_k = 40, .seed = 1});
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "nn/transformer.h"
#include "runner/text/bpe_tokenizer.h"

namespace mantissa::runner {

struct GenerateOptions {
  std::string prompt{};  // empty: "\n", as nanoGPT's sample.py starts
  int64_t tokens = 256;  // new tokens after the prompt
  double temperature = 1.0;
  std::optional<int64_t> top_k{};
  uint64_t seed = 0;
  // The run's BPE tokenizer (data.tokenizer of a tokens_bin run); null: bytes.
  std::shared_ptr<const BpeTokenizer> tokenizer{};
};

// The prompt followed by `tokens` sampled tokens, in eval mode (no dropout) and with the KV cache;
// the same options give the same text. The model's vocabulary must hold the tokenizer's (256 for
// bytes), and a sampled id the tokenizer does not have is an error naming it (the model was not
// trained with that tokenizer). The model's mode is restored.
std::string generate_text(nn::GPTImpl& model, const GenerateOptions& options);

}  // namespace mantissa::runner
