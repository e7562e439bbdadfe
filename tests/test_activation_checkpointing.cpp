// nn::checkpoint (torch.utils.checkpoint, non-reentrant) and the GPT's per-block checkpointing:
// the gradients are bitwise those of the same step without it (dropout on, float32 and bf16
// autocast), the tensors saved inside the function are not kept after the forward, the random
// and autocast states are the forward's during the recomputation and unchanged after it, the
// selective form keeps the attention's outputs and replays them, and what it cannot do is
// refused by name.
#include <memory>

#include "amp/autocast.h"
#include "autograd/backward.h"
#include "autograd/node.h"
#include "engine/generator.h"
#include "nn/checkpoint.h"
#include "nn/functional.h"
#include "nn/loss.h"
#include "nn/transformer.h"
#include "test_util.h"

namespace mt = mantissa;
namespace F = mt::nn::functional;
using mt::Tensor;

namespace {

Tensor leaf(mt::Shape shape, uint64_t seed) {
  mt::manual_seed(seed);
  return mt::randn(shape).requires_grad_();
}

// x -> dropout(gelu(x @ w)) * x.sin(): saves several tensors, draws random numbers.
Tensor block(const Tensor& x, const Tensor& w) {
  return mt::mul(F::dropout(F::gelu(mt::matmul(x, w)), 0.3, true), mt::sin(x));
}

std::vector<Tensor> grads_of(const std::vector<Tensor>& leaves) {
  std::vector<Tensor> g;
  for (const Tensor& l : leaves) g.push_back(l.grad().clone());
  return g;
}

void expect_bitwise(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].defined() && b[i].defined()) << i;
    EXPECT_TRUE(mt::equal(a[i], b[i])) << "gradient " << i << " differs";
  }
}

}  // namespace

TEST(ActivationCheckpointing, GradientsAreBitwiseThoseWithout) {
  std::vector<std::vector<Tensor>> runs;
  for (bool checkpointed : {false, true}) {
    Tensor x = leaf({4, 6}, 1), w = leaf({6, 6}, 2);
    mt::manual_seed(7);  // the dropout mask
    const auto f = [&w](const Tensor& in) { return block(in, w); };
    Tensor y = checkpointed ? mt::nn::checkpoint(f, x) : f(x);
    const auto rng_after_forward = mt::get_rng_states();
    y.pow(2).sum().backward();
    // The recomputation drew its mask from the forward's state and put the stream back.
    const auto rng_after_backward = mt::get_rng_states();
    EXPECT_EQ(rng_after_backward[0].offset, rng_after_forward[0].offset);
    runs.push_back(grads_of({x, w}));
  }
  expect_bitwise(runs[0], runs[1]);
}

TEST(ActivationCheckpointing, SavedTensorsAreNotKeptAfterTheForward) {
  for (bool checkpointed : {false, true}) {
    Tensor x = leaf({5}, 3);
    std::weak_ptr<mt::TensorImpl> inner;
    int calls = 0;
    const auto f = [&](const Tensor& in) {
      ++calls;
      Tensor h = in * 2.0;  // an intermediate that sin saves for backward
      if (calls == 1) inner = h.impl_ptr();
      return mt::sin(h);
    };
    Tensor y = checkpointed ? mt::nn::checkpoint(f, x) : f(x);
    EXPECT_EQ(inner.expired(), checkpointed);
    y.sum().backward();
    EXPECT_EQ(calls, checkpointed ? 2 : 1);  // recomputed once, in backward
    mt::testing::expect_close(x.grad(), 2.0 * mt::cos(x.detach() * 2.0));
  }
}

TEST(ActivationCheckpointing, RetainGraphBackwardsTwice) {
  Tensor x = leaf({3}, 4);
  Tensor y = mt::nn::checkpoint([](const Tensor& in) { return (in * in).exp(); }, x);
  y.sum().backward(Tensor(), /*retain_graph=*/true);
  const Tensor once = x.grad().clone();
  y.sum().backward();
  EXPECT_TRUE(mt::equal(x.grad(), 2.0 * once));
}

TEST(ActivationCheckpointing, WithoutGradModeRunsOnce) {
  Tensor x = leaf({3}, 5);
  int calls = 0;
  mt::autograd::NoGradGuard no_grad;
  Tensor y = mt::nn::checkpoint(
      [&calls](const Tensor& in) {
        ++calls;
        return in.exp();
      },
      x);
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(y.requires_grad());
}

TEST(ActivationCheckpointing, RefusesWhatItCannotDo) {
  Tensor x = leaf({3}, 6);
  Tensor y = mt::nn::checkpoint([](const Tensor& in) { return mt::sin(in); }, x);
  mt::testing::expect_error(
      [&] { mt::autograd::grad({y.sum()}, {x}, {}, true, false, /*create_graph=*/true); },
      {"checkpoint: backward with create_graph=true", "not supported"});
  // A function that does other ops when run again.
  int calls = 0;
  Tensor z = mt::nn::checkpoint(
      [&calls](const Tensor& in) { return ++calls == 1 ? mt::sin(in) : mt::sin(in).exp(); }, x);
  mt::testing::expect_error([&] { z.sum().backward(); },
                            {"recomputing the function saved 2 tensors", "forward saved 1"});
}

namespace {

mt::nn::GPTConfig small_gpt() {
  mt::nn::GPTConfig c;
  c.block_size = 16;
  c.vocab_size = 32;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = 0.1;
  return c;
}

// One training step's gradients of every parameter, blocks checkpointed or not.
std::vector<Tensor> gpt_step_grads(const std::vector<int64_t>& checkpointed, bool bf16,
                                   const mt::nn::CheckpointOptions& options = {}) {
  mt::manual_seed(11);
  mt::nn::GPT model(small_gpt());
  model->set_activation_checkpointing(checkpointed, options);
  mt::manual_seed(12);
  const Tensor idx = mt::randint(0, 32, {2, 16}, mt::TensorOptions().dtype(mt::kInt64));
  const Tensor target = mt::randint(0, 32, {2, 16}, mt::TensorOptions().dtype(mt::kInt64));
  mt::manual_seed(13);  // dropout
  Tensor loss;
  {
    std::optional<mt::amp::autocast> scope;
    if (bf16) scope.emplace(mt::Device::cpu(), mt::amp::Precision(mt::kBFloat16));
    const Tensor logits = model(idx);
    loss = F::cross_entropy(logits.reshape({-1, 32}), target.reshape({-1}));
  }
  loss.backward();
  std::vector<Tensor> g;
  for (const Tensor& p : model->parameters()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace

TEST(ActivationCheckpointing, GptBlocksGiveTheSameGradients) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 autocast" : "float32");
    const std::vector<Tensor> plain = gpt_step_grads({}, bf16);
    expect_bitwise(gpt_step_grads({0, 1, 2}, bf16), plain);
    expect_bitwise(gpt_step_grads({1}, bf16), plain);
    // Selective: the attention outputs kept, the rest recomputed.
    expect_bitwise(gpt_step_grads({0, 1, 2}, bf16, {{"scaled_dot_product_attention"}}), plain);
  }
  mt::nn::GPT model(small_gpt());
  mt::testing::expect_error([&] { model->set_activation_checkpointing({3}); },
                            {"activation checkpointing of block 3", "blocks 0 to 2"});
}

namespace {

// Causal attention with dropout between two recorded ops: what a block's attention does.
Tensor attention_block(const Tensor& x) {
  const Tensor h = mt::sin(x);
  return mt::exp(mt::scaled_dot_product_attention(h, h, h, Tensor(), 0.2, true));
}

}  // namespace

// The kept attention output is what backward uses: its gradients are the plain step's bits, the
// recomputation replays it rather than running the kernel (an output modified in place after
// the forward is refused by the replay, and is not seen without save_ops), and it is freed when
// backward has passed.
TEST(ActivationCheckpointing, KeptAttentionOutputsReplaceItsRecomputation) {
  const mt::nn::CheckpointOptions keep{{"scaled_dot_product_attention"}};
  const auto grads = [&](int mode) {  // 0: plain, 1: checkpointed, 2: checkpointed + kept
    Tensor x = leaf({2, 9, 4}, 21);
    mt::manual_seed(22);
    Tensor y = mode == 0   ? attention_block(x)
               : mode == 1 ? mt::nn::checkpoint(attention_block, x)
                           : mt::nn::checkpoint(attention_block, x, keep);
    y.sum().backward();
    return grads_of({x});
  };
  const std::vector<Tensor> plain = grads(0);
  expect_bitwise(grads(1), plain);
  expect_bitwise(grads(2), plain);

  // The kept output is the forward's own: changing it in place is caught when it is replayed.
  Tensor kept_out;
  const auto leaky = [&kept_out](const Tensor& x) {
    const Tensor h = mt::sin(x);
    kept_out = mt::scaled_dot_product_attention(h, h, h, Tensor(), 0.0, true);
    return mt::exp(kept_out);
  };
  for (bool with_keep : {false, true}) {
    Tensor x = leaf({2, 9, 4}, 23);
    Tensor y = with_keep ? mt::nn::checkpoint(leaky, x, keep) : mt::nn::checkpoint(leaky, x);
    {
      mt::autograd::NoGradGuard no_grad;
      kept_out.detach().mul_(2.0);
    }
    if (with_keep) {
      mt::testing::expect_error([&] { y.sum().backward(); },
                                {"scaled_dot_product_attention", "modified in place"});
    } else {
      y.sum().backward();  // recomputed: the change is not seen
      EXPECT_TRUE(x.grad().defined());
    }
  }
}

TEST(ActivationCheckpointing, KeptKernelsMustRunAsInTheForward) {
  const mt::nn::CheckpointOptions keep{{"scaled_dot_product_attention"}};
  Tensor x = leaf({1, 5, 4}, 24);
  int calls = 0;
  Tensor y = mt::nn::checkpoint(
      [&calls](const Tensor& in) {
        Tensor o = mt::scaled_dot_product_attention(in, in, in);
        // The recomputation runs the attention once more than the forward did.
        if (++calls > 1) o = mt::scaled_dot_product_attention(o, o, o);
        return mt::sin(o);
      },
      x, keep);
  mt::testing::expect_error([&] { y.sum().backward(); },
                            {"ran scaled_dot_product_attention more often than its forward"});
  mt::testing::expect_error(
      [&] { mt::nn::checkpoint([](const Tensor& in) { return mt::sin(in); }, x, {{"matmul"}}); },
      {"save_ops names matmul", "ops that can: scaled_dot_product_attention"});
  mt::nn::GPT model(small_gpt());
  mt::testing::expect_error([&] { model->set_activation_checkpointing({0}, {{"softmax"}}); },
                            {"save_ops names softmax"});
}
