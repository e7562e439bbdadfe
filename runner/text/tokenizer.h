// The byte-level tokenizer: every byte is its own token, so the vocabulary is the 256 byte values
// and any text (any bytes, UTF-8 or not) encodes and decodes back unchanged. It is what the
// `text` dataset and `mantissa generate` use; a model trained on it needs a vocabulary of at
// least 256.
//
//   runner::ByteTokenizer tok;
//   std::vector<int64_t> ids = tok.encode("To be");   // {84, 111, 32, 98, 101}
//   std::string text = tok.decode(ids);                // "To be"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa::runner {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  int64_t vocab_size() const { return kVocabSize; }
  std::vector<int64_t> encode(std::string_view text) const;
  // Throws mantissa::Error naming the position and value of an id outside [0, 256).
  std::string decode(const std::vector<int64_t>& ids) const;
};

}  // namespace mantissa::runner
