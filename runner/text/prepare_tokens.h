// nanoGPT's data preparation with a BPE tokenizer: a text cut into a training and a validation
// part (the first 90% of its characters and the rest, as nanoGPT's prepare.py scripts cut it),
// each encoded, written as little-endian uint16 token ids (train.bin, val.bin): what
// `mantissa prepare` writes and data.type tokens_bin reads.
//
//   auto tok = runner::BpeTokenizer::load("gpt2/tokenizer.json");
//   runner::TrainValTokens s = runner::tokenize_train_val(runner::read_file_bytes("input.txt"),
//   tok, 0.1); runner::write_file_atomically("train.bin", runner::uint16_token_bytes(s.train,
//   "train.bin"));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runner/text/bpe_tokenizer.h"

namespace mantissa::runner {

struct TrainValTokens {
  std::vector<int64_t> train, val;
  int64_t train_chars = 0, val_chars = 0;  // characters (code points) of each part
  int64_t replaced = 0;                    // ill-formed UTF-8 sequences read as U+FFFD
};

// The text's first floor(n * (1 - val_fraction)) of its n characters (after ill-formed UTF-8 is
// read as U+FFFD) are the training part, the rest the validation part, each encoded on its own.
// val_fraction in [0, 1). `progress` is as BpeTokenizer::encode's, over both parts' bytes.
TrainValTokens tokenize_train_val(std::string_view text, const BpeTokenizer& tokenizer,
                                  double val_fraction, const BpeTokenizer::Progress& progress = {});

// The ids as little-endian uint16; throws mantissa::Error naming `what` and the first id that
// does not fit (a vocabulary larger than 65536 needs another format).
std::string uint16_token_bytes(const std::vector<int64_t>& ids, const std::string& what);

}  // namespace mantissa::runner
