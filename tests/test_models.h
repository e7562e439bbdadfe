// The small model the tests train: PyTorch's ToyModel, net2(relu(net1(x))) with parameters
// net1.* and net2.* (what the golden trajectories and the README use), with its sizes, a dropout
// after the ReLU (so a forward pass also draws from the generator) and its printed type name as
// options. One definition, so every test trains the same module.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/layers.h"
#include "nn/module.h"
#include "nn/transformer.h"

namespace mantissa::testing {

struct ToyModelOptions {
  int64_t in = 10, hidden = 10, out = 5;
  std::optional<double> dropout{};  // a Dropout child `drop` after the ReLU, with this p
  std::string name{};               // the printed type name; empty: "ToyModel"
};

struct ToyModel : nn::Module {
  nn::Linear net1{nullptr}, net2{nullptr};
  nn::ReLU relu;
  nn::Dropout drop{nullptr};

  explicit ToyModel(const ToyModelOptions& o = {}) : nn::Module(o.name) {
    net1 = register_module("net1", nn::Linear(o.in, o.hidden));
    relu = register_module("relu", nn::ReLU());
    if (o.dropout) drop = register_module("drop", nn::Dropout(*o.dropout));
    net2 = register_module("net2", nn::Linear(o.hidden, o.out));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = relu(net1(x));
    if (!drop.is_empty()) h = drop(h);
    return net2(h);
  }
};

// The small GPT the tests train and split: 2 layers, 2 heads, 16 wide, block 8, 32 tokens.
inline nn::GPTConfig tiny_gpt_config(double dropout = 0.0, bool bias = true) {
  nn::GPTConfig c;
  c.block_size = 8;
  c.vocab_size = 32;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.dropout = dropout;
  c.bias = bias;
  return c;
}

}  // namespace mantissa::testing
