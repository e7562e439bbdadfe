// Byte-level text generation from an nn::GPT (runner/text/generate.h): deterministic per seed, the
// prompt kept, the model's mode restored, and models that cannot speak bytes refused.
#include <gtest/gtest.h>

#include "engine/generator.h"
#include "nn/transformer.h"
#include "runner/text/generate.h"
#include "test_util.h"

namespace mt = mantissa;
using mt::testing::expect_error;

namespace {

mt::nn::GPT tiny_gpt(int64_t vocab = 256) {
  mt::manual_seed(3);
  return mt::nn::GPT(mt::nn::GPTConfig{.block_size = 16,
                                       .vocab_size = vocab,
                                       .n_layer = 2,
                                       .n_head = 2,
                                       .n_embd = 16,
                                       .dropout = 0.1});
}

}  // namespace

TEST(RunnerGenerate, SameSeedSameTextAndThePromptIsKept) {
  auto model = tiny_gpt();
  model->train();
  const mt::runner::GenerateOptions o{.prompt = "To be", .tokens = 40, .top_k = 20, .seed = 5};
  const std::string a = mt::runner::generate_text(*model, o);
  const std::string b = mt::runner::generate_text(*model, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 5u + 40u);  // longer than block_size: the context is cropped
  EXPECT_EQ(a.substr(0, 5), "To be");
  EXPECT_TRUE(model->is_training()) << "the mode is restored";
  auto other = o;
  other.seed = 6;
  EXPECT_NE(mt::runner::generate_text(*model, other), a);
  // Without a prompt it starts from a newline that it does not print.
  EXPECT_EQ(mt::runner::generate_text(*model, {.tokens = 7, .seed = 1}).size(), 7u);
  EXPECT_EQ(mt::runner::generate_text(*model, {.prompt = "x", .tokens = 0}), "x");
}

TEST(RunnerGenerate, RefusesModelsThatDoNotSpeakBytes) {
  auto small = tiny_gpt(100);
  expect_error([&] { mt::runner::generate_text(*small, {.prompt = "a", .tokens = 3}); },
               {"vocabulary (100)", "256"});
  auto wide = tiny_gpt(4096);  // untrained: it samples ids above 255
  expect_error([&] { mt::runner::generate_text(*wide, {.prompt = "a", .tokens = 50, .seed = 2}); },
               {"sampled token", "which the byte tokenizer does not have"});
  auto model = tiny_gpt();
  expect_error([&] { mt::runner::generate_text(*model, {.prompt = "a", .tokens = -1}); },
               {"tokens must be >= 0"});
}
