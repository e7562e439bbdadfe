// Fuzz target: the BPE tokenizer's readers and its encoder (runner/text/bpe_tokenizer.h).
//
// Input: a mode byte, then
//   0: a tokenizer.json (BpeTokenizer::from_tokenizer_json);
//   1: vocab.json, a NUL byte, merges.txt (BpeTokenizer::from_vocab_and_merges);
//   2: text, encoded by a small byte-level tokenizer built here (256 byte tokens, a few merges and
//      an added token).
// A mantissa::Error is a clean refusal. A tokenizer that is accepted encodes text, and every
// encoding must decode to the text as read (ill-formed UTF-8 as U+FFFD): byte-level BPE loses
// nothing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz/fuzz_util.h"
#include "runner/text/bpe_tokenizer.h"
#include "runner/text/gpt2_pretokenizer.h"

namespace mt = mantissa;
namespace rn = mantissa::runner;

namespace {

// GPT-2's byte table, for the built-in tokenizer's vocabulary.
std::string spelled(int b) {
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int k = 0; k < b; ++k) n += !((k >= 33 && k <= 126) || (k >= 161 && k <= 172) || k >= 174);
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xc0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3f));
  }
  return s;
}

const rn::BpeTokenizer& builtin() {
  static const rn::BpeTokenizer t = [] {
    std::string vocab = "{";
    for (int b = 0; b < 256; ++b)
      vocab += "\"" +
               (b == '"'    ? std::string("\\\"")
                : b == '\\' ? std::string("\\\\")
                            : spelled(b)) +
               "\": " + std::to_string(b) + ",";
    vocab += "\"th\": 256, \"the\": 257, \"\xc4\xa0the\": 258, \"\xc4\xa0\xc4\xa0\": 259}";
    const std::string merges = "#version: 0.2\nt h\nth e\n\xc4\xa0 the\n\xc4\xa0 \xc4\xa0\n";
    return rn::BpeTokenizer::from_vocab_and_merges(vocab, merges, "builtin");
  }();
  return t;
}

void round_trip(const rn::BpeTokenizer& tok, std::string_view text) {
  const std::vector<int64_t> ids = tok.encode(text);
  for (const int64_t id : ids)
    if (id < 0 || id >= tok.vocab_size()) std::abort();
  if (tok.decode(ids) != rn::repair_utf8(text)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  mt::fuzz::quiet();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 3) {
      case 0: {
        const auto tok = rn::BpeTokenizer::from_tokenizer_json(input, "tokenizer.json");
        round_trip(tok, "Hello  world's 42 \xff\xc3(\n\n <|endoftext|>x");
        break;
      }
      case 1: {
        const size_t nul = input.find('\0');
        if (nul == std::string_view::npos) return 0;
        const auto tok = rn::BpeTokenizer::from_vocab_and_merges(input.substr(0, nul),
                                                                 input.substr(nul + 1), "files");
        round_trip(tok, "Hello  world's 42 \xff\xc3(\n\n x");
        break;
      }
      default:
        round_trip(builtin(), input);
        break;
    }
  } catch (const mt::Error& e) {
    mt::fuzz::refused(e);
  }
  return 0;
}
