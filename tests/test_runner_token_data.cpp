// Token data: the byte tokenizer, memory-mapped text and uint16 token files, fixed-length blocks
// at seeded random offsets, the train/validation split and int64 token sequences in safetensors.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "engine/factory.h"
#include "runner/data/data.h"
#include "runner/data/token_data.h"
#include "runner/files/safetensors.h"
#include "runner/text/tokenizer.h"
#include "temp_dir.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::Tensor;
using mt::runner::Batch;
using mt::runner::DataLoader;
using mt::runner::DataLoaderOptions;
using mt::testing::expect_error;
using mt::testing::TempDir;

TEST(RunnerData, SafetensorsTokenSequencesWithShiftedTargets) {
  // Int64 [N, T] token ids, the targets the inputs shifted by one (what a language model trains
  // on when its data was tokenized ahead of time).
  TempDir dir;
  const auto path = (dir.path / "tokens.safetensors").string();
  const Tensor tokens = mt::arange(15, mt::kInt64).reshape({3, 5});
  mt::runner::save_safetensors(path, {{"inputs", tokens.narrow(1, 0, 4).contiguous()},
                                      {"targets", tokens.narrow(1, 1, 4).contiguous()}});
  auto ds = mt::runner::load_safetensors_dataset({.path = path});
  EXPECT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->input_shape(), mt::Shape{4});
  EXPECT_EQ(ds->input_dtype(), mt::DType::Int64);
  EXPECT_EQ(ds->target_dtype(), mt::DType::Int64);
  const Batch b = ds->get_batch({2, 0});
  EXPECT_EQ(b.input.shape(), (mt::Shape{2, 4}));
  EXPECT_EQ(b.input.to_vector<int64_t>(), (std::vector<int64_t>{10, 11, 12, 13, 0, 1, 2, 3}));
  EXPECT_EQ(b.target.to_vector<int64_t>(), (std::vector<int64_t>{11, 12, 13, 14, 1, 2, 3, 4}));
}

TEST(RunnerData, ByteTokenizerRoundTripsAnyBytes) {
  mt::runner::ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.encode("To be"), (std::vector<int64_t>{84, 111, 32, 98, 101}));
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const auto ids = tok.encode(all);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 255);  // bytes, not signed chars
  EXPECT_EQ(tok.decode(ids), all);
  EXPECT_EQ(tok.decode(tok.encode("h\xc3\xa9 \xe2\x80\x94")), "h\xc3\xa9 \xe2\x80\x94");
  expect_error([&] { tok.decode({104, 256}); }, {"token 256", "position 1", "[0, 256)"});
  expect_error([&] { tok.decode({-1}); }, {"token -1", "position 0"});
}

namespace {

std::string little_endian_u16(const std::vector<uint16_t>& v) {
  std::string s;
  for (uint16_t x : v) {
    s += static_cast<char>(x & 0xff);
    s += static_cast<char>(x >> 8);
  }
  return s;
}

}  // namespace

TEST(RunnerData, TextBlocksAreShiftedByOneAndDrawnFromSeedEpochAndIndex) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 1000; ++i) text += static_cast<char>('a' + i % 26);
  auto file = mt::runner::map_token_file(dir.file("t.txt", text), mt::runner::TokenFormat::Bytes);
  EXPECT_EQ(file->tokens(), 1000);
  mt::runner::TokenBlockDataset ds(file, 0, 1000, {.block_size = 8, .seed = 3});
  EXPECT_EQ(ds.size(), 999 / 8);
  EXPECT_EQ(ds.input_shape(), mt::Shape{8});
  EXPECT_EQ(ds.input_dtype(), mt::DType::Int64);
  const Batch b = ds.get_epoch_batch({0, 5}, 2);
  ASSERT_EQ(b.input.shape(), (mt::Shape{2, 8}));
  const auto x = b.input.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
  for (int r = 0; r < 2; ++r) {
    const int64_t o = ds.offset(r == 0 ? 0 : 5, 2);
    ASSERT_TRUE(o >= 0 && o + 9 <= 1000) << o;
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(x[r * 8 + i], static_cast<unsigned char>(text[o + i]));
      EXPECT_EQ(y[r * 8 + i], static_cast<unsigned char>(text[o + i + 1]));
    }
  }
  // A pure function of (seed, epoch, index): the same again and in another dataset object; other
  // epochs and seeds give other offsets, spread over the whole range.
  mt::runner::TokenBlockDataset again(file, 0, 1000, {.block_size = 8, .seed = 3});
  mt::runner::TokenBlockDataset other_seed(file, 0, 1000, {.block_size = 8, .seed = 4});
  int same_epoch = 0, same_seed = 0;
  std::set<int64_t> offsets;
  for (int64_t i = 0; i < ds.size(); ++i) {
    EXPECT_EQ(ds.offset(i, 1), again.offset(i, 1));
    same_epoch += ds.offset(i, 1) == ds.offset(i, 2);
    same_seed += ds.offset(i, 1) == other_seed.offset(i, 1);
    for (int64_t e = 0; e < 20; ++e) offsets.insert(ds.offset(i, e));
  }
  EXPECT_LT(same_epoch, 5);
  EXPECT_LT(same_seed, 5);
  EXPECT_EQ(*offsets.begin() < 20 && *offsets.rbegin() > 1000 - 9 - 20, true);
  EXPECT_LE(*offsets.rbegin(), 1000 - 9);
  EXPECT_EQ(ds.get_batch({1}).input.to_vector<int64_t>(),
            ds.get_epoch_batch({1}, 0).input.to_vector<int64_t>());
}

TEST(RunnerData, TextSplitKeepsTheTailForValidationInConsecutiveBlocks) {
  TempDir dir;
  std::string text(1000, 'x');
  for (int i = 900; i < 1000; ++i) text[i] = static_cast<char>('0' + i % 10);
  auto file = mt::runner::map_token_file(dir.file("t.txt", text), mt::runner::TokenFormat::Bytes);
  const auto split = mt::runner::split_token_blocks(file, {.block_size = 16, .seed = 1}, 0.1);
  ASSERT_TRUE(split.train && split.val);
  EXPECT_EQ(split.train->end(), 900);
  EXPECT_EQ(split.val->begin(), 900);
  EXPECT_EQ(split.val->size(), 99 / 16);
  for (int64_t i = 0; i < split.train->size(); ++i)  // training never reads the tail
    for (int64_t e = 0; e < 5; ++e) EXPECT_LE(split.train->offset(i, e) + 17, 900);
  for (int64_t i = 0; i < split.val->size(); ++i) {
    EXPECT_EQ(split.val->offset(i, 0), 900 + 16 * i);
    EXPECT_EQ(split.val->offset(i, 7), 900 + 16 * i);  // the same every evaluation
  }
  const auto v = split.val->get(1).input.to_vector<int64_t>();
  EXPECT_EQ(v[0], '0' + 916 % 10);
  const auto capped =
      mt::runner::split_token_blocks(file, {.block_size = 16, .seed = 1}, 0.1, /*val_blocks=*/2);
  EXPECT_EQ(capped.val->size(), 2);
  EXPECT_EQ(mt::runner::split_token_blocks(file, {.block_size = 16}, 0.0).val, nullptr);
  expect_error([&] { mt::runner::split_token_blocks(file, {.block_size = 200}, 0.1); },
               {"val_split 0.1 leaves 100", "block_size + 1 = 201"});
  expect_error([&] { mt::runner::split_token_blocks(file, {.block_size = 999}, 0.5); },
               {"training part's 500", "block_size + 1 = 1000"});
}

TEST(RunnerData, TokenLoaderResumesTheSameRandomBlocks) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>((i * 7919) % 251);
  auto file = mt::runner::map_token_file(dir.file("t.txt", text), mt::runner::TokenFormat::Bytes);
  auto ds = std::make_shared<mt::runner::TokenBlockDataset>(
      file, 0, 5000, mt::runner::TokenBlockOptions{.block_size = 32, .seed = 9});
  DataLoaderOptions lo{.batch_size = 8, .shuffle = true, .seed = 9};
  DataLoader full(ds, lo);
  std::vector<std::vector<int64_t>> expected;
  for (int s = 0; s < 50; ++s) {  // crosses epoch boundaries (20 batches per epoch)
    auto b = full.next();
    if (!b) b = full.next();
    expected.push_back(b->input.to_vector<int64_t>());
  }
  DataLoader first(ds, lo);
  mt::runner::LoaderPosition state;
  for (int s = 0; s < 23; ++s) {
    auto b = first.next();
    if (!b) b = first.next();
    EXPECT_EQ(b->input.to_vector<int64_t>(), expected[s]);
  }
  state = first.state();
  DataLoader resumed(ds, lo);
  resumed.load_state(state);
  for (int s = 23; s < 50; ++s) {
    auto b = resumed.next();
    if (!b) b = resumed.next();
    EXPECT_EQ(b->input.to_vector<int64_t>(), expected[s]) << "step " << s;
  }
  // Unshuffled, the same index in another epoch is another block.
  DataLoader in_order(ds, {.batch_size = 8, .shuffle = false});
  const auto epoch0 = in_order.next()->input.to_vector<int64_t>();
  in_order.set_epoch(1);
  EXPECT_NE(in_order.next()->input.to_vector<int64_t>(), epoch0);
}

TEST(RunnerData, Uint16TokenFileAsNanoGptWritesIt) {
  TempDir dir;
  std::vector<uint16_t> ids;
  for (int i = 0; i < 300; ++i) ids.push_back(static_cast<uint16_t>(i * 211 % 50257));
  ids[7] = 65535;  // the high byte matters
  auto file = mt::runner::map_token_file(dir.file("train.bin", little_endian_u16(ids)),
                                         mt::runner::TokenFormat::Uint16);
  EXPECT_EQ(file->tokens(), 300);
  mt::runner::TokenBlockDataset ds(file, 0, 300, {.block_size = 10, .random_offsets = false});
  EXPECT_EQ(ds.size(), 29);
  const Batch b = ds.get_batch({0, 28});
  const auto x = b.input.to_vector<int64_t>(), y = b.target.to_vector<int64_t>();
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(x[i], ids[i]);
    EXPECT_EQ(y[i], ids[i + 1]);
    EXPECT_EQ(x[10 + i], ids[280 + i]);
    EXPECT_EQ(y[10 + i], ids[281 + i]);
  }
  EXPECT_EQ(x[7], 65535);
  // An id the model cannot take is an error naming it and where it is.
  mt::runner::TokenBlockDataset small_vocab(
      file, 0, 300, {.block_size = 10, .random_offsets = false, .vocab_size = 50257});
  expect_error([&] { small_vocab.get_batch({0}); },
               {"train.bin", "token 65535 at position 7", "vocabulary of 50257"});
  // The fingerprint follows the bytes.
  const std::string before = ds.fingerprint();
  ids[100] ^= 1;
  auto changed = mt::runner::map_token_file(dir.file("b.bin", little_endian_u16(ids)),
                                            mt::runner::TokenFormat::Uint16);
  mt::runner::TokenBlockDataset ds2(changed, 0, 300, {.block_size = 10, .random_offsets = false});
  EXPECT_NE(ds2.fingerprint(), before);
}

TEST(RunnerData, HostileTokenFilesGiveOneClearError) {
  TempDir dir;
  using mt::runner::TokenFormat;
  expect_error([&] { mt::runner::map_token_file(dir.file("e.txt", ""), TokenFormat::Bytes); },
               {"e.txt", "is empty"});
  expect_error([&] { mt::runner::map_token_file(dir.file("odd.bin", "abc"), TokenFormat::Uint16); },
               {"odd.bin", "3 bytes", "uint16"});
  expect_error(
      [&] { mt::runner::map_token_file((dir.path / "none").string(), TokenFormat::Bytes); },
      {"none"});
  expect_error([&] { mt::runner::map_token_file(dir.path.string(), TokenFormat::Bytes); },
               {"directory"});
  auto tiny = mt::runner::map_token_file(dir.file("tiny.txt", "abcd"), TokenFormat::Bytes);
  expect_error([&] { mt::runner::TokenBlockDataset(tiny, 0, 4, {.block_size = 4}); },
               {"tiny.txt", "4 tokens", "block_size + 1 = 5"});
  expect_error([&] { mt::runner::TokenBlockDataset(tiny, 0, 9, {.block_size = 1}); },
               {"outside the 4 tokens"});
  mt::runner::TokenBlockDataset ok(tiny, 0, 4, {.block_size = 1});
  expect_error([&] { ok.get_batch({3}); }, {"index 3", "3 blocks"});
}
