#include "runner/generate.h"

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/tokenizer.h"

namespace mantissa::runner {

std::string generate_text(nn::GPTImpl& model, const GenerateOptions& o) {
  const ByteTokenizer tok;
  MT_CHECK(model.config().vocab_size >= tok.vocab_size(), "generate: the model's vocabulary (",
           model.config().vocab_size, ") is smaller than the byte tokenizer's ", tok.vocab_size());
  MT_CHECK(o.tokens >= 0, "generate: tokens must be >= 0, got ", o.tokens);
  const std::vector<int64_t> prompt = tok.encode(o.prompt.empty() ? "\n" : o.prompt);
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
    MT_CHECK(ids[i] < tok.vocab_size(), "generate: the model sampled token ", ids[i],
             ", not a byte: it was not trained with the byte tokenizer (vocabulary ",
             model.config().vocab_size, ")");
  }
  if (o.prompt.empty()) ids.erase(ids.begin());  // the "\n" it started from was not asked for
  return tok.decode(ids);
}

}  // namespace mantissa::runner
