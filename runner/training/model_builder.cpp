#include "runner/training/model_builder.h"

#include <sstream>

#include "nn/conv.h"
#include "nn/norm.h"
#include "nn/pooling.h"
#include "nn/transformer.h"
#include "runner/config/config_keys.h"
#include "runner/files/gpt_weights.h"
#include "runner/files/safetensors.h"
#include "runner/files/text.h"

namespace mantissa::runner {

bool is_gpt(const ModelConfig& model) { return model.layers.empty() && model.preset == "gpt"; }

namespace {

// One overload per layer struct (runner/config/layer_options.h): a layer type without one does not
// compile.
using Layer = std::shared_ptr<nn::UnaryModule>;
Layer make_layer(const LinearLayer& l) { return nn::Linear(l.in, l.out, l.bias).ptr(); }
Layer make_layer(const ReLULayer&) { return nn::ReLU().ptr(); }
Layer make_layer(const GELULayer& l) { return nn::GELU(l.approximate).ptr(); }
Layer make_layer(const SigmoidLayer&) { return nn::Sigmoid().ptr(); }
Layer make_layer(const TanhLayer&) { return nn::Tanh().ptr(); }
Layer make_layer(const DropoutLayer& l) { return nn::Dropout(l.p).ptr(); }
Layer make_layer(const LayerNormLayer& l) {
  return nn::LayerNorm(Shape(l.shape), l.eps, l.affine).ptr();
}
template <typename Module, typename Options>
Layer make_conv(const ConvKeys& l) {
  Options o;
  o.stride = l.stride;
  o.padding = l.padding;
  o.bias = l.bias;
  return Module(l.in, l.out, l.kernel, o).ptr();
}
Layer make_layer(const Conv2dLayer& l) { return make_conv<nn::Conv2d, nn::Conv2dOptions>(l); }
Layer make_layer(const MaxPool2dLayer& l) {
  nn::MaxPool2dOptions o;
  o.stride = Size2(l.stride);
  o.padding = l.padding;
  return nn::MaxPool2d(l.kernel, o).ptr();
}
Layer make_layer(const FlattenLayer& l) { return nn::Flatten(l.start_dim, l.end_dim).ptr(); }
Layer make_layer(const Conv1dLayer& l) { return make_conv<nn::Conv1d, nn::Conv1dOptions>(l); }
Layer make_layer(const AdaptiveAvgPool2dLayer& l) {
  return nn::AdaptiveAvgPool2d(Size2(l.output_size.front(), l.output_size.back())).ptr();
}
Layer make_layer(const IdentityLayer&) { return nn::Identity().ptr(); }
Layer make_layer(const BatchNorm1dLayer& l) {
  return nn::BatchNorm1d(l.features, l.eps, l.momentum, l.affine).ptr();
}
Layer make_layer(const BatchNorm2dLayer& l) {
  return nn::BatchNorm2d(l.features, l.eps, l.momentum, l.affine).ptr();
}
Layer make_layer(const GroupNormLayer& l) {
  return nn::GroupNorm(l.groups, l.features, l.eps, l.affine).ptr();
}
Layer make_layer(const RMSNormLayer& l) {
  return nn::RMSNorm(Shape(l.shape), l.eps, l.affine).ptr();
}
// The activations of engine/activations.def, with their parameters.
#define MT_ACTIVATION(name, Module, Math, node, policy) \
  Layer make_layer(const Module##Layer&) { return nn::Module().ptr(); }
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0) \
  Layer make_layer(const Module##Layer& l) { return nn::Module(l.p0).ptr(); }
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  Layer make_layer(const Module##Layer& l) { return nn::Module(l.p0, l.p1).ptr(); }
#include "engine/activations.def"

// The in and out of the layers that have both (the sizes most often too large to allocate).
template <typename L>
concept Sized = requires(const L& l) {
  l.in;
  l.out;
};

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
    schema::check_selected(l.options, l.type, kLayerTypes, "model.layers");
    std::shared_ptr<nn::UnaryModule> layer;
    try {
      layer = std::visit([](const auto& o) { return make_layer(o); }, l.options);
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      // Most often sizes too large to allocate: the message names the key that asked for them
      // (the larger of in and out for the layers that have both).
      std::string key = l.path, sizes;
      std::visit(
          [&](const auto& o) {
            if constexpr (Sized<std::decay_t<decltype(o)>>) {
              key += o.out >= o.in ? ".out" : ".in";
              sizes = ", in " + std::to_string(o.in) + ", out " + std::to_string(o.out);
            }
          },
          l.options);
      throw ConfigError("config error: " + key + ": cannot build " + l.path + " (" + l.type +
                        sizes + "): " + e.what());
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
    const bool sized =
        std::visit([](const auto& o) { return Sized<std::decay_t<decltype(o)>>; }, l.options);
    if (sized) return l.path + ".out";
  }
  return model.layers.back().path + ".type";
}

namespace {

// One layer's output shape from its input's `s` (one example's shape), or a config error on the
// key that does not fit; one overload per layer struct that changes or checks the shape.
struct OutputShape {
  const Config& config;
  const LayerSpec& l;
  Shape s;
  std::string arriving;  // "its input is [...] (...)", for messages

  [[noreturn]] void fail(const char* key, const std::string& problem) const {
    config.fail(l.path + "." + key, problem);
  }
  void image(const char* key) const {
    if (s.size() != 3)
      fail(key, l.type + " needs [channels, height, width] inputs, but " + arriving);
  }
  // A square window over [C, H, W] to `channels` planes.
  Shape window(int64_t channels, int64_t kernel, int64_t stride, int64_t padding) const {
    if (s[1] + 2 * padding < kernel || s[2] + 2 * padding < kernel) {
      fail("kernel", "is larger than the (padded) image: " + arriving);
    }
    return Shape{channels, (s[1] + 2 * padding - kernel) / stride + 1,
                 (s[2] + 2 * padding - kernel) / stride + 1};
  }
  void channels(int64_t features) const {
    if (s[0] != features) fail("features", "does not match the input channels: " + arriving);
  }
  void trailing(const std::vector<int64_t>& shape) const {
    const int64_t n = static_cast<int64_t>(shape.size());
    bool ok = s.size() >= n;
    for (int64_t i = 0; ok && i < n; ++i) ok = s[s.size() - n + i] == shape[i];
    if (!ok) fail("shape", "must equal the trailing dimensions: " + arriving);
  }

  // Elementwise layers and the rest that keep the shape.
  template <typename L>
  Shape operator()(const L&) const {
    return s;
  }
  Shape operator()(const LinearLayer& o) const {
    if (s.size() == 0 || s.back() != o.in) fail("in", "does not match the input: " + arriving);
    Shape out = s;
    out[out.size() - 1] = o.out;
    return out;
  }
  // s is one example's shape: [C] or [C, L] (batchnorm1d), [C, H, W] (batchnorm2d).
  Shape operator()(const BatchNorm1dLayer& o) const {
    if (s.size() != 1 && s.size() != 2) rank();
    channels(o.features);
    return s;
  }
  Shape operator()(const BatchNorm2dLayer& o) const {
    if (s.size() != 3) rank();
    channels(o.features);
    return s;
  }
  Shape operator()(const GroupNormLayer& o) const {
    if (s.size() < 1) rank();
    channels(o.features);
    if (o.features % o.groups != 0) {
      fail("groups", "must divide features (" + std::to_string(o.features) + ")");
    }
    return s;
  }
  [[noreturn]] void rank() const {
    fail("type", l.type + " does not take inputs of this rank: " + arriving);
  }
  Shape operator()(const LayerNormLayer& o) const {
    trailing(o.shape);
    return s;
  }
  Shape operator()(const RMSNormLayer& o) const {
    trailing(o.shape);
    return s;
  }
  Shape operator()(const Conv2dLayer& o) const {
    image("in");
    if (s[0] != o.in) fail("in", "does not match the input channels: " + arriving);
    return window(o.out, o.kernel, o.stride, o.padding);
  }
  Shape operator()(const MaxPool2dLayer& o) const {
    image("kernel");
    return window(s[0], o.kernel, o.stride, o.padding);
  }
  Shape operator()(const Conv1dLayer& o) const {
    if (s.size() != 2) fail("in", "conv1d needs [channels, length] inputs, but " + arriving);
    if (s[0] != o.in) fail("in", "does not match the input channels: " + arriving);
    if (s[1] + 2 * o.padding < o.kernel) {
      fail("kernel", "is longer than the (padded) input: " + arriving);
    }
    return Shape{o.out, (s[1] + 2 * o.padding - o.kernel) / o.stride + 1};
  }
  Shape operator()(const AdaptiveAvgPool2dLayer& o) const {
    image("output_size");
    return Shape{s[0], o.output_size.front(), o.output_size.back()};
  }
  Shape operator()(const FlattenLayer& o) const {
    // start_dim/end_dim count the batch dimension, as torch.nn.Flatten's.
    const int64_t nd = static_cast<int64_t>(s.size()) + 1;
    const int64_t a = o.start_dim < 0 ? o.start_dim + nd : o.start_dim;
    const int64_t b = o.end_dim < 0 ? o.end_dim + nd : o.end_dim;
    if (a < 1 || b >= nd || a > b) {
      fail("start_dim", "flatten(start_dim=" + std::to_string(o.start_dim) +
                            ", end_dim=" + std::to_string(o.end_dim) +
                            ") does not fit: " + arriving + " (dimension 0 is the batch)");
    }
    std::vector<int64_t> out;
    for (int64_t i = 1; i < a; ++i) out.push_back(s[i - 1]);
    int64_t prod = 1;
    for (int64_t i = a; i <= b; ++i) prod *= s[i - 1];
    out.push_back(prod);
    for (int64_t i = b + 1; i < nd; ++i) out.push_back(s[i - 1]);
    return Shape(out);
  }
};

}  // namespace

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
    OutputShape step{config, l, s, "its input is " + shape_str(s) + " (" + from + ")"};
    s = std::visit(step, l.options);
    from = "after " + l.path + " (" + l.type + ")";
  }
  return s;
}

}  // namespace mantissa::runner
