#include "runner/text/generate.h"

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/text/tokenizer.h"

namespace mantissa::runner {

std::string generate_text(nn::GPTImpl& model, const GenerateOptions& o) {
  const ByteTokenizer bytes;
  const BpeTokenizer* bpe = o.tokenizer.get();
  const int64_t vocab = bpe != nullptr ? bpe->vocab_size() : bytes.vocab_size();
  const std::string tokenizer_name =
      bpe != nullptr ? "tokenizer '" + bpe->source() + "'" : std::string("byte tokenizer");
  MT_CHECK(model.config().vocab_size >= vocab, "generate: the model's vocabulary (",
           model.config().vocab_size, ") is smaller than the ", tokenizer_name, "'s (", vocab, ")");
  MT_CHECK(o.tokens >= 0, "generate: tokens must be >= 0, got ", o.tokens);
  const std::string prompt_text = o.prompt.empty() ? "\n" : o.prompt;
  const std::vector<int64_t> prompt =
      bpe != nullptr ? bpe->encode(prompt_text) : bytes.encode(prompt_text);
  const auto n = static_cast<int64_t>(prompt.size());
  Device device = Device::cpu();
  for (const auto& p : model.parameters()) {
    device = p.device();
    break;
  }
  const Tensor idx = from_vector(prompt, Shape{1, n}).to(device);
  const bool was_training = model.is_training();
  model.eval();
  Tensor out;
  try {
    out = model.generate(idx, o.tokens, o.temperature, o.top_k, o.seed);
  } catch (...) {
    model.train(was_training);
    throw;
  }
  model.train(was_training);
  std::vector<int64_t> ids = out.cpu().to_vector<int64_t>();
  for (size_t i = static_cast<size_t>(n); i < ids.size(); ++i) {
    MT_CHECK(ids[i] < vocab, "generate: the model sampled token ", ids[i], ", which the ",
             tokenizer_name, " does not have (", vocab,
             " tokens): it was not trained with it (model vocabulary ", model.config().vocab_size,
             ")");
  }
  // The "\n" it started from was not asked for.
  if (o.prompt.empty()) ids.erase(ids.begin(), ids.begin() + n);
  return bpe != nullptr ? bpe->decode(ids) : bytes.decode(ids);
}

}  // namespace mantissa::runner
