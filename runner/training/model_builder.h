// Models from the `model:` section of a run config: the `toy` preset (PyTorch's ToyModel,
// Linear(10,10) -> ReLU -> Linear(10,5) with parameters net1.*, net2.*), the `gpt` preset
// (nn::GPT, nanoGPT's names: int64 token ids [B, T] in, logits [B, T, vocab] out) or a layer list
// built as an nn::Sequential whose parameters are named as PyTorch's nn.Sequential names them
// ("0.weight", "2.bias"), or "<name>.weight" for a layer with a `name:`. So a safetensors file
// exported from here loads into the same model in PyTorch, and the reverse.
#pragma once

#include <memory>

#include "engine/shape.h"
#include "nn/layers.h"
#include "nn/transformer.h"
#include "runner/config/config.h"

namespace mantissa::runner {

// The model on the CPU in float32, freshly initialised from the engine's default generator
// (seed it first for reproducible weights): the toy model or a layer list (not the gpt preset).
std::shared_ptr<nn::SequentialImpl> build_model(const ModelConfig& model);
// Any model a config describes: build_model's, or for the gpt preset an nn::GPTImpl.
std::shared_ptr<nn::UnaryModule> build_run_model(const ModelConfig& model);
// The model is `preset: gpt` (an nn::GPT taking int64 token ids) rather than a layer list.
bool is_gpt(const ModelConfig& model);
// The nn::GPTConfig of a gpt preset (unset keys take nn::GPTConfig's defaults), without building
// the model.
nn::GPTConfig gpt_config(const ModelConfig& model);

// Loads the safetensors file at `path` into a model build_model made: strictly by name, and for a
// GPT from a nanoGPT or Hugging Face GPT-2 state dict (runner/files/gpt_weights.h).
void load_model_weights(nn::UnaryModule& model, const std::string& path);

// The shape of one example's output (no batch dimension) for one example's input `input`,
// following the layers. A layer that cannot take its input (a linear's `in` differs from the
// features arriving, a conv2d given a non-image, a pool window larger than the image) is a
// ConfigError through config.fail naming that layer's key, its value, its line and the shape that
// arrives; `input_what` says where the input comes from ("data input shape [10]").
Shape infer_output_shape(const Config& config, const Shape& input, const std::string& input_what);

// The config key that determines the model's output size ("model.layers.2.out",
// "model.preset"), for messages about the output not matching the targets.
std::string output_key(const ModelConfig& model);

}  // namespace mantissa::runner
