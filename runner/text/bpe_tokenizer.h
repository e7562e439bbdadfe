// GPT-2's byte-level BPE tokenizer, from the files people have: a Hugging Face `tokenizer.json`
// (GPT-2's, or one trained with `tokenizers`' ByteLevelBPETokenizer), or GPT-2's original
// `vocab.json` + `merges.txt`. Token ids are those Hugging Face tokenizers gives:
//   1. the added tokens of a tokenizer.json (GPT-2's "<|endoftext|>") are cut out of the text
//      wherever they appear, leftmost first and longest at the same place, each one id;
//   2. the rest is cut into pieces by GPT-2's pattern (runner/text/gpt2_pretokenizer.h);
//   3. each piece's bytes are merged by rank, lowest first and leftmost among equals, as the
//      merges list orders them.
// Text that is not well-formed UTF-8 is first read as Python's errors="replace" reads it (each bad
// sequence one U+FFFD), since Hugging Face tokenizers takes only text. decode() turns ids back
// into bytes, the added tokens' own text included.
//
//   auto tok = runner::BpeTokenizer::load("gpt2/tokenizer.json");   // or the folder
//   std::vector<int64_t> ids = tok.encode("Hello world");             // {15496, 995}
//   std::string text = tok.decode(ids);                               // "Hello world"
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mantissa::runner {

class BpeTokenizer {
 public:
  // PATH is a tokenizer.json, a vocab.json with merges.txt beside it, or a folder holding
  // tokenizer.json or vocab.json + merges.txt. Throws mantissa::Error naming the file and what is
  // wrong with it: unreadable, not JSON, or a tokenizer this one would not reproduce (another
  // model or pre-tokenizer, a normalizer, a post-processor that adds tokens, dropout, ...) named by
  // its key.
  static BpeTokenizer load(const std::string& path);
  // From the files' contents; `what` names them in errors.
  static BpeTokenizer from_tokenizer_json(std::string_view json_text, const std::string& what);
  static BpeTokenizer from_vocab_and_merges(std::string_view vocab_json,
                                            std::string_view merges_txt, const std::string& what);

  // One more than the highest id: what a model's vocabulary must hold.
  int64_t vocab_size() const { return vocab_size_; }
  // `replaced`: how many ill-formed UTF-8 sequences were read as U+FFFD. `progress`, when given,
  // is called with the bytes encoded so far and the text's size about every MiB.
  using Progress = std::function<void(size_t done, size_t total)>;
  std::vector<int64_t> encode(std::string_view text, int64_t* replaced = nullptr,
                              const Progress& progress = {}) const;
  // The bytes of the ids' tokens, concatenated. Throws mantissa::Error naming the position of an
  // id that is no token.
  std::string decode(const std::vector<int64_t>& ids) const;
  // Where it was loaded from.
  const std::string& source() const { return source_; }

 private:
  struct AddedToken {
    std::string content;
    int32_t id;
    bool normalized;  // matched after the tokens that are not (Hugging Face's two passes)
  };
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  BpeTokenizer() = default;
  struct PieceCache;
  void add_token(std::string bytes, int64_t id, const std::string& what);
  void add_merge(std::string_view left, std::string_view right, int32_t rank,
                 const std::string& what);
  void split_added(std::string_view text, bool normalized, PieceCache& cache,
                   std::vector<int64_t>& out) const;
  void finish(const std::string& what);
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void encode_ordinary(std::string_view text, PieceCache& cache, std::vector<int64_t>& out) const;

  std::string source_;
  std::unordered_map<std::string, int32_t> bytes_to_id_;  // the vocabulary, as raw bytes
  std::unordered_map<int32_t, std::string> id_bytes_;     // id -> bytes (ids may have gaps)
  int64_t vocab_size_ = 0;
  std::array<int32_t, 256> byte_id_{};          // the one-byte tokens
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> rank, merged id
  std::vector<AddedToken> added_;
  bool ignore_merges_ = false;  // a piece that is a whole token is that token
  bool add_prefix_space_ = false;
};

}  // namespace mantissa::runner
