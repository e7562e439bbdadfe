// BPE encode speed on one core (docs/performance.md, "Tokenizer"): the seconds each of `reps`
// encodes of a whole text takes, after one warm-up encode, as one JSON line. Loading the tokenizer
// and reading the text are not timed.
//
//   mantissa_tokenizer_bench TOKENIZER TEXT [reps]
//
// bench/peers/hf_tokenizers_encode.py runs it interleaved with Hugging Face tokenizers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "runner/files/atomic_file.h"
#include "runner/text/bpe_tokenizer.h"

namespace rn = mantissa::runner;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: mantissa_tokenizer_bench TOKENIZER TEXT [reps]\n");
    return 2;
  }
  const auto tok = rn::BpeTokenizer::load(argv[1]);
  const std::string text = rn::read_file_bytes(argv[2]);
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  size_t tokens = tok.encode(text).size();
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    tokens = tok.encode(text).size();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("{\"bytes\": %zu, \"tokens\": %zu, \"seconds\": [", text.size(), tokens);
  for (size_t i = 0; i < seconds.size(); ++i) std::printf("%s%.6f", i ? ", " : "", seconds[i]);
  std::printf("]}\n");
  return 0;
}
