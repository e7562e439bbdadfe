// nanoGPT-style train.bin / val.bin from a text and a BPE tokenizer.
#include "runner/text/prepare_tokens.h"

#include <cmath>

#include "engine/error.h"
#include "runner/text/gpt2_pretokenizer.h"

namespace mantissa::runner {

TrainValTokens tokenize_train_val(std::string_view text, const BpeTokenizer& tokenizer,
                                  double val_fraction, const BpeTokenizer::Progress& progress) {
  MT_CHECK(val_fraction >= 0 && val_fraction < 1,
           "prepare: the validation fraction must be in [0, 1), got ", val_fraction);
  TrainValTokens s;
  // Ill-formed UTF-8 is read as U+FFFD once, here, so that both parts are cut from the same
  // characters; well-formed text (the usual corpus) is not copied.
  std::string repaired_copy;
  std::string_view repaired = text;
  if (!is_valid_utf8(text)) {
    repaired_copy = repair_utf8(text, &s.replaced);
    repaired = repaired_copy;
  }
  int64_t chars = 0;
  for (const char c : repaired) chars += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  // nanoGPT: train_data = data[:int(n*0.9)], in Python's float arithmetic.
  const auto train_chars =
      static_cast<int64_t>(std::floor(static_cast<double>(chars) * (1.0 - val_fraction)));
  size_t cut = 0;
  for (int64_t seen = 0; cut < repaired.size(); ++cut) {
    if ((static_cast<unsigned char>(repaired[cut]) & 0xc0) != 0x80 && seen++ == train_chars) break;
  }
  s.train_chars = train_chars;
  s.val_chars = chars - train_chars;
  const std::string_view all = repaired;
  const size_t total = all.size();
  s.train = tokenizer.encode(
      all.substr(0, cut), nullptr,
      progress ? BpeTokenizer::Progress([&](size_t done, size_t) { progress(done, total); })
               : BpeTokenizer::Progress());
  s.val = tokenizer.encode(
      all.substr(cut), nullptr,
      progress ? BpeTokenizer::Progress([&](size_t done, size_t) { progress(cut + done, total); })
               : BpeTokenizer::Progress());
  return s;
}

std::string uint16_token_bytes(const std::vector<int64_t>& ids, const std::string& what) {
  std::string out(ids.size() * 2, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    MT_CHECK(ids[i] >= 0 && ids[i] < 65536, what, ": token ", ids[i], " at position ", i,
             " does not fit in uint16 (the vocabulary is larger than 65536)");
    out[2 * i] = static_cast<char>(ids[i] & 0xff);
    out[2 * i + 1] = static_cast<char>(ids[i] >> 8);
  }
  return out;
}

}  // namespace mantissa::runner
