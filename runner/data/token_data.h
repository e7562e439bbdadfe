// Token datasets for language models: fixed-length blocks cut from one long stream of token ids,
// the stream being a text file read as bytes (runner/text/tokenizer.h) or nanoGPT's train.bin /
// val.bin (little-endian uint16 ids). The file is memory-mapped, never copied, so a corpus larger
// than memory trains as well as a small one.
//
// An example is block_size + 1 consecutive tokens: input [T] int64 = tokens[o, o + T) and target
// [T] int64 = tokens[o + 1, o + T + 1). For training the offsets o are random, as nanoGPT's
// get_batch draws them, but as a pure function of (seed, epoch, index): the DataLoader's position
// restores them exactly, and each epoch sees fresh offsets. For evaluation the blocks are
// consecutive and non-overlapping, so every evaluation reads the same tokens.
//
//   auto file = runner::map_token_file("data/shakespeare/input.txt", runner::TokenFormat::Bytes);
//   auto parts = runner::split_token_blocks(file, {.block_size = 128, .seed = 1}, 0.1);
//   runner::DataLoader loader(parts.train, {.batch_size = 16, .shuffle = false});
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runner/data/data.h"

namespace mantissa::runner {

enum class TokenFormat {
  Bytes,   // one token per byte, ids 0..255 (the byte tokenizer)
  Uint16,  // little-endian uint16 per token (nanoGPT's prepare.py output)
};

// A read-only memory mapping of a whole regular file, with its tokens' count and format.
class TokenFile {
 public:
  // Throws mantissa::Error naming the path: not a regular file, unreadable, empty, or (uint16) an
  // odd number of bytes.
  TokenFile(std::string path, TokenFormat format);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t tokens() const { return tokens_; }
  int64_t token(int64_t i) const {
    return format_ == TokenFormat::Bytes
               ? static_cast<int64_t>(bytes_[i])
               : static_cast<int64_t>(bytes_[2 * i] | (uint32_t(bytes_[2 * i + 1]) << 8));
  }
  TokenFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  // FNV-1a over the file's size and bytes: the whole file up to 256 MiB, else 64 evenly spaced
  // 1 MiB windows (reading a many-GiB corpus whole at every start would cost more than the check
  // is worth). Computed once.
  const std::string& fingerprint() const;

 private:
  std::string path_;
  TokenFormat format_;
  const unsigned char* bytes_ = nullptr;
  int64_t size_ = 0;
  int64_t tokens_ = 0;
  mutable std::string fingerprint_;
};

std::shared_ptr<const TokenFile> map_token_file(const std::string& path, TokenFormat format);

struct TokenBlockOptions {
  int64_t block_size = 128;  // T
  uint64_t seed = 0;
  // true: random offsets per (seed, epoch, index); false: consecutive blocks from the start.
  bool random_offsets = true;
  // Examples per epoch; 0: as many as non-overlapping blocks fit, (tokens - 1) / T.
  int64_t max_blocks = 0;
  // For token ids the model cannot take: every id must be below it (0: no check). Checked on
  // gathering, since a mapped corpus is not read ahead.
  int64_t vocab_size = 0;
};

// Blocks of tokens[begin, end) of a file.
class TokenBlockDataset : public Dataset {
 public:
  TokenBlockDataset(std::shared_ptr<const TokenFile> file, int64_t begin, int64_t end,
                    TokenBlockOptions options);
  int64_t size() const override { return blocks_; }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    return get_epoch_batch(indices, 0);
  }
  Batch get_epoch_batch(const std::vector<int64_t>& indices, int64_t epoch) const override;
  Shape input_shape() const override { return Shape{options_.block_size}; }
  Shape target_shape() const override { return Shape{options_.block_size}; }
  DType input_dtype() const override { return DType::Int64; }
  DType target_dtype() const override { return DType::Int64; }
  std::string describe() const override;
  std::string fingerprint() const override;
  // The first token of example `index` in `epoch`.
  int64_t offset(int64_t index, int64_t epoch) const;
  const TokenFile& file() const { return *file_; }
  std::shared_ptr<const TokenFile> file_ptr() const { return file_; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  const TokenBlockOptions& options() const { return options_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t begin_, end_;
  TokenBlockOptions options_;
  int64_t blocks_ = 0;
};

// Training blocks (random offsets) over the head of the file and evaluation blocks (consecutive)
// over its tail fraction `val_fraction` (0: no validation part, `val` null). Both parts must hold
// at least one block of block_size + 1 tokens. `val_blocks` > 0 caps the evaluation blocks.
struct TokenSplit {
  std::shared_ptr<TokenBlockDataset> train;
  std::shared_ptr<TokenBlockDataset> val;
};
TokenSplit split_token_blocks(std::shared_ptr<const TokenFile> file, TokenBlockOptions options,
                              double val_fraction, int64_t val_blocks = 0);

}  // namespace mantissa::runner
