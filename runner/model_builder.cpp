#include "runner/model_builder.h"

#include <sstream>

#include "nn/conv.h"
#include "nn/norm.h"
#include "nn/pooling.h"
#include "nn/transformer.h"
#include "runner/gpt_weights.h"
#include "runner/safetensors.h"
#include "runner/text.h"

namespace mantissa::runner {

bool is_gpt(const ModelConfig& model) { return model.layers.empty() && model.preset == "gpt"; }

namespace {

std::shared_ptr<nn::UnaryModule> make_layer(const LayerSpec& l) {
  if (l.type == "linear") return nn::Linear(l.in, l.out, l.bias).ptr();
  if (l.type == "relu") return nn::ReLU().ptr();
  if (l.type == "gelu") return nn::GELU(l.approximate).ptr();
  if (l.type == "sigmoid") return nn::Sigmoid().ptr();
  if (l.type == "tanh") return nn::Tanh().ptr();
  if (l.type == "dropout") return nn::Dropout(l.p).ptr();
  if (l.type == "layernorm") return nn::LayerNorm(Shape(l.shape), l.eps, l.affine).ptr();
  if (l.type == "conv2d") {
    nn::Conv2dOptions o;
    o.stride = l.stride;
    o.padding = l.padding;
    o.bias = l.bias;
    return nn::Conv2d(l.in, l.out, l.kernel, o).ptr();
  }
  if (l.type == "maxpool2d") {
    nn::MaxPool2dOptions o;
    o.stride = Size2(l.stride);
    o.padding = l.padding;
    return nn::MaxPool2d(l.kernel, o).ptr();
  }
  if (l.type == "flatten") return nn::Flatten(l.start_dim, l.end_dim).ptr();
  if (l.type == "conv1d") {
    nn::Conv1dOptions o;
    o.stride = l.stride;
    o.padding = l.padding;
    o.bias = l.bias;
    return nn::Conv1d(l.in, l.out, l.kernel, o).ptr();
  }
  if (l.type == "adaptive_avg_pool2d") {
    return nn::AdaptiveAvgPool2d(Size2(l.output_size.front(), l.output_size.back())).ptr();
  }
  if (l.type == "identity") return nn::Identity().ptr();
    // The activations of engine/activations.def, with their parameters' keys.
#define MT_ACTIVATION(name, Module, Math, node, policy) \
  if (l.type == #name) return nn::Module().ptr();
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0) \
  if (l.type == #name) return nn::Module(l.p0).ptr();
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  if (l.type == #name) return nn::Module(l.p0, l.p1).ptr();
#include "engine/activations.def"
  if (l.type == "batchnorm1d")
    return nn::BatchNorm1d(l.features, l.eps, l.momentum, l.affine).ptr();
  if (l.type == "batchnorm2d")
    return nn::BatchNorm2d(l.features, l.eps, l.momentum, l.affine).ptr();
  if (l.type == "groupnorm") return nn::GroupNorm(l.groups, l.features, l.eps, l.affine).ptr();
  if (l.type == "rmsnorm") return nn::RMSNorm(Shape(l.shape), l.eps, l.affine).ptr();
  MT_THROW("build_model: unknown layer type '", l.type, "' at ", l.path);
}

}  // namespace

nn::GPTConfig gpt_config(const ModelConfig& model) {
  nn::GPTConfig c;
  c.n_layer = model.gpt.n_layer;
  c.n_head = model.gpt.n_head;
  c.n_embd = model.gpt.n_embd;
  c.block_size = model.gpt.block_size;
  c.vocab_size = model.gpt.vocab_size;
  c.dropout = model.gpt.dropout;
  c.bias = model.gpt.bias;
  if (!model.gpt.activation.empty()) c.activation = model.gpt.activation;
  if (model.gpt.layer_norm_eps > 0) c.layer_norm_eps = model.gpt.layer_norm_eps;
  return c;
}

std::shared_ptr<nn::UnaryModule> build_run_model(const ModelConfig& model) {
  if (is_gpt(model)) {
    const nn::GPTConfig c = gpt_config(model);
    try {
      nn::GPT gpt(c);
      nn::CheckpointOptions keep;
      if (model.gpt.checkpoint_keep_attention) keep.save_ops = {"scaled_dot_product_attention"};
      gpt->set_activation_checkpointing(model.gpt.activation_checkpointing.indices(c.n_layer),
                                        keep);
      return gpt.ptr();
    } catch (const Error& e) {
      throw ConfigError("config error: model: cannot build the gpt model (n_layer " +
                        std::to_string(c.n_layer) + ", n_embd " + std::to_string(c.n_embd) +
                        ", vocab_size " + std::to_string(c.vocab_size) + ", block_size " +
                        std::to_string(c.block_size) + "): " + e.what());
    }
  }
  return build_model(model);
}

std::shared_ptr<nn::SequentialImpl> build_model(const ModelConfig& model) {
  auto seq = std::make_shared<nn::SequentialImpl>();
  if (model.layers.empty()) {
    MT_CHECK(model.preset == "toy", "build_model: unknown model preset '", model.preset, "'");
    // PyTorch's ToyModel: net2(relu(net1(x))).
    seq->push_back("net1", nn::Linear(10, 10));
    seq->push_back("relu", nn::ReLU());
    seq->push_back("net2", nn::Linear(10, 5));
    return seq;
  }
  for (size_t i = 0; i < model.layers.size(); ++i) {
    const LayerSpec& l = model.layers[i];
    std::shared_ptr<nn::UnaryModule> layer;
    try {
      layer = make_layer(l);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      // Most often sizes too large to allocate: the message names the key that asked for them
      // (the larger of in and out for the layers that have both).
      const bool sized = l.type == "linear" || l.type == "conv2d" || l.type == "conv1d";
      const std::string key = sized ? l.path + (l.out >= l.in ? ".out" : ".in") : l.path;
      throw ConfigError("config error: " + key + ": cannot build " + l.path + " (" + l.type +
                        (sized ? ", in " + std::to_string(l.in) + ", out " + std::to_string(l.out)
                               : std::string()) +
                        "): " + e.what());
    }
    seq->push_back(l.name.empty() ? std::to_string(i) : l.name, std::move(layer));
  }
  return seq;
}

void load_model_weights(nn::UnaryModule& model, const std::string& path) {
  if (auto* gpt = dynamic_cast<nn::GPTImpl*>(&model)) {
    load_gpt_weights(*gpt, load_safetensors(path));
  } else {
    load_weights(model, load_safetensors(path), /*strict=*/true);
  }
}

std::string output_key(const ModelConfig& model) {
  if (model.layers.empty()) return "model.preset";
  for (size_t i = model.layers.size(); i-- > 0;) {
    const LayerSpec& l = model.layers[i];
    if (l.type == "linear" || l.type == "conv2d" || l.type == "conv1d") return l.path + ".out";
  }
  return model.layers.back().path + ".type";
}

Shape infer_output_shape(const Config& config, const Shape& input, const std::string& input_what) {
  if (is_gpt(config.model)) {
    const GptModelOptions& g = config.model.gpt;
    if (input.size() != 1 || input[0] > g.block_size) {
      config.fail("model.block_size", "the gpt model takes a sequence of at most " +
                                          std::to_string(g.block_size) + " token ids, but the " +
                                          input_what + " is " + shape_str(input));
    }
    return Shape{input[0], g.vocab_size};
  }
  if (config.model.layers.empty()) {
    if (input.size() != 1 || input[0] != 10) {
      config.fail("model.preset", "the toy model takes 10 input features, but the " + input_what +
                                      " is " + shape_str(input));
    }
    return Shape{5};
  }
  Shape s = input;
  std::string from = input_what;
  for (const LayerSpec& l : config.model.layers) {
    const std::string arriving = "its input is " + shape_str(s) + " (" + from + ")";
    auto image = [&](const char* key) {
      if (s.size() != 3) {
        config.fail(l.path + "." + key,
                    l.type + " needs [channels, height, width] inputs, but " + arriving);
      }
    };
    if (l.type == "linear") {
      if (s.size() == 0 || s.back() != l.in) {
        config.fail(l.path + ".in", "does not match the input: " + arriving);
      }
      s[s.size() - 1] = l.out;
    } else if (l.type == "batchnorm1d" || l.type == "batchnorm2d" || l.type == "groupnorm") {
      // s is one example's shape: [C] or [C, L] (batchnorm1d), [C, H, W] (batchnorm2d).
      const bool rank_ok = l.type == "batchnorm1d"   ? s.size() == 1 || s.size() == 2
                           : l.type == "batchnorm2d" ? s.size() == 3
                                                     : s.size() >= 1;
      if (!rank_ok) {
        config.fail(l.path + ".type", l.type + " does not take inputs of this rank: " + arriving);
      }
      if (s[0] != l.features) {
        config.fail(l.path + ".features", "does not match the input channels: " + arriving);
      }
      if (l.type == "groupnorm" && l.features % l.groups != 0) {
        config.fail(l.path + ".groups",
                    "must divide features (" + std::to_string(l.features) + ")");
      }
    } else if (l.type == "layernorm" || l.type == "rmsnorm") {
      const int64_t n = static_cast<int64_t>(l.shape.size());
      bool ok = s.size() >= n;
      for (int64_t i = 0; ok && i < n; ++i) ok = s[s.size() - n + i] == l.shape[i];
      if (!ok) config.fail(l.path + ".shape", "must equal the trailing dimensions: " + arriving);
    } else if (l.type == "conv2d" || l.type == "maxpool2d") {
      image(l.type == "conv2d" ? "in" : "kernel");
      if (l.type == "conv2d" && s[0] != l.in) {
        config.fail(l.path + ".in", "does not match the input channels: " + arriving);
      }
      const int64_t h = (s[1] + 2 * l.padding - l.kernel) / l.stride + 1;
      const int64_t w = (s[2] + 2 * l.padding - l.kernel) / l.stride + 1;
      if (s[1] + 2 * l.padding < l.kernel || s[2] + 2 * l.padding < l.kernel) {
        config.fail(l.path + ".kernel", "is larger than the (padded) image: " + arriving);
      }
      s = Shape{l.type == "conv2d" ? l.out : s[0], h, w};
    } else if (l.type == "conv1d") {
      if (s.size() != 2) {
        config.fail(l.path + ".in", "conv1d needs [channels, length] inputs, but " + arriving);
      }
      if (s[0] != l.in) {
        config.fail(l.path + ".in", "does not match the input channels: " + arriving);
      }
      if (s[1] + 2 * l.padding < l.kernel) {
        config.fail(l.path + ".kernel", "is longer than the (padded) input: " + arriving);
      }
      s = Shape{l.out, (s[1] + 2 * l.padding - l.kernel) / l.stride + 1};
    } else if (l.type == "adaptive_avg_pool2d") {
      image("output_size");
      s = Shape{s[0], l.output_size.front(), l.output_size.back()};
    } else if (l.type == "flatten") {
      // start_dim/end_dim count the batch dimension, as torch.nn.Flatten's.
      const int64_t nd = s.size() + 1;
      int64_t a = l.start_dim < 0 ? l.start_dim + nd : l.start_dim;
      int64_t b = l.end_dim < 0 ? l.end_dim + nd : l.end_dim;
      if (a < 1 || b >= nd || a > b) {
        config.fail(l.path + ".start_dim", "flatten(start_dim=" + std::to_string(l.start_dim) +
                                               ", end_dim=" + std::to_string(l.end_dim) +
                                               ") does not fit: " + arriving +
                                               " (dimension 0 is the batch)");
      }
      std::vector<int64_t> out;
      for (int64_t i = 1; i < a; ++i) out.push_back(s[i - 1]);
      int64_t prod = 1;
      for (int64_t i = a; i <= b; ++i) prod *= s[i - 1];
      out.push_back(prod);
      for (int64_t i = b + 1; i < nd; ++i) out.push_back(s[i - 1]);
      s = Shape(out);
    }
    from = "after " + l.path + " (" + l.type + ")";
  }
  return s;
}

}  // namespace mantissa::runner
