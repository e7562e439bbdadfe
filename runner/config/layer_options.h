// The layer types of model.layers: one options struct per type, holding that layer's keys (the
// arguments of its nn module, under the config's names), and LayerOptions, the variant over them.
//
// Each struct names its type once (`kType`) and lists its keys once (`each`, as the optimizers'
// and losses' options structs do); kLayerTypes is made from the variant; schema::layer_keys()
// below documents and checks each key once (which types take it, and its default for each, come
// from the structs); model_builder.cpp has one make_layer overload per struct, so a type without
// a builder does not compile. A new layer type is a struct and its rows here, and its overloads
// in model_builder.cpp. The nn modules' own options structs (nn::Conv2dOptions, ...) are not used
// here: they take pairs and padding modes (Size2, ConvPadding) where the config takes one integer,
// and the sizes (in, out, kernel) are their constructors' arguments.
//
// The activations of engine/activations.def are types too: their structs are made from the list,
// one double member per parameter, named and defaulted as there.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "runner/config/config_keys.h"

namespace mantissa::runner {

// Visits each key of a layer struct: f(name, member).
#define MT_LAYER_KEYS(...)                                             \
  template <typename Self, typename F>                                 \
  static void each([[maybe_unused]] Self& o, [[maybe_unused]] F&& f) { \
    __VA_ARGS__                                                        \
  }

struct LinearLayer {
  static constexpr const char* kType = "linear";
  int64_t in = 0, out = 0;  // features
  bool bias = true;
  MT_LAYER_KEYS(f("in", o.in); f("out", o.out); f("bias", o.bias);)
};
struct ReLULayer {
  static constexpr const char* kType = "relu";
  MT_LAYER_KEYS()
};
struct GELULayer {
  static constexpr const char* kType = "gelu";
  std::string approximate = "none";  // none | tanh
  MT_LAYER_KEYS(f("approximate", o.approximate);)
};
struct SigmoidLayer {
  static constexpr const char* kType = "sigmoid";
  MT_LAYER_KEYS()
};
struct TanhLayer {
  static constexpr const char* kType = "tanh";
  MT_LAYER_KEYS()
};
struct DropoutLayer {
  static constexpr const char* kType = "dropout";
  double p = 0.5;
  MT_LAYER_KEYS(f("p", o.p);)
};
struct LayerNormLayer {
  static constexpr const char* kType = "layernorm";
  std::vector<int64_t> shape;  // normalized_shape
  double eps = 1e-5;
  bool affine = true;  // elementwise_affine
  MT_LAYER_KEYS(f("shape", o.shape); f("eps", o.eps); f("affine", o.affine);)
};
// conv1d and conv2d take the same keys (conv2d's kernel square).
struct ConvKeys {
  int64_t in = 0, out = 0;  // channels
  int64_t kernel = 0, stride = 1, padding = 0;
  bool bias = true;
  MT_LAYER_KEYS(f("in", o.in); f("out", o.out); f("kernel", o.kernel); f("stride", o.stride);
                f("padding", o.padding); f("bias", o.bias);)
};
struct Conv2dLayer : ConvKeys {
  static constexpr const char* kType = "conv2d";
};
struct MaxPool2dLayer {
  static constexpr const char* kType = "maxpool2d";
  int64_t kernel = 0, stride = 1, padding = 0;  // stride: the config's default is kernel
  MT_LAYER_KEYS(f("kernel", o.kernel); f("stride", o.stride); f("padding", o.padding);)
};
struct FlattenLayer {
  static constexpr const char* kType = "flatten";
  int64_t start_dim = 1, end_dim = -1;  // counting the batch dimension, as torch.nn.Flatten's
  MT_LAYER_KEYS(f("start_dim", o.start_dim); f("end_dim", o.end_dim);)
};
struct Conv1dLayer : ConvKeys {
  static constexpr const char* kType = "conv1d";
};
struct AdaptiveAvgPool2dLayer {
  static constexpr const char* kType = "adaptive_avg_pool2d";
  std::vector<int64_t> output_size;  // [h, w], or one size for both
  MT_LAYER_KEYS(f("output_size", o.output_size);)
};
struct IdentityLayer {
  static constexpr const char* kType = "identity";
  MT_LAYER_KEYS()
};
// batchnorm1d and batchnorm2d take the same keys.
struct BatchNormKeys {
  int64_t features = 0;  // num_features
  double eps = 1e-5;
  double momentum = 0.1;
  bool affine = true;
  MT_LAYER_KEYS(f("features", o.features); f("momentum", o.momentum); f("eps", o.eps);
                f("affine", o.affine);)
};
struct BatchNorm1dLayer : BatchNormKeys {
  static constexpr const char* kType = "batchnorm1d";
};
struct BatchNorm2dLayer : BatchNormKeys {
  static constexpr const char* kType = "batchnorm2d";
};
struct GroupNormLayer {
  static constexpr const char* kType = "groupnorm";
  int64_t features = 0;  // num_channels
  int64_t groups = 1;    // num_groups
  double eps = 1e-5;
  bool affine = true;
  MT_LAYER_KEYS(f("features", o.features); f("groups", o.groups); f("eps", o.eps);
                f("affine", o.affine);)
};
struct RMSNormLayer {
  static constexpr const char* kType = "rmsnorm";
  std::vector<int64_t> shape;  // normalized_shape
  double eps = std::numeric_limits<float>::epsilon();
  bool affine = true;  // a weight only
  MT_LAYER_KEYS(f("eps", o.eps); f("affine", o.affine); f("shape", o.shape);)
};

// The activations of engine/activations.def: `<Module>Layer`, one member per parameter.
#define MT_ACTIVATION(name, Module, Math, node, policy) \
  struct Module##Layer {                                \
    static constexpr const char* kType = #name;         \
    MT_LAYER_KEYS()                                     \
  };
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0) \
  struct Module##Layer {                                                       \
    static constexpr const char* kType = #name;                                \
    double p0 = d0;                                                            \
    MT_LAYER_KEYS(f(#p0, o.p0);)                                               \
  };
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  struct Module##Layer {                                                                       \
    static constexpr const char* kType = #name;                                                \
    double p0 = d0;                                                                            \
    double p1 = d1;                                                                            \
    MT_LAYER_KEYS(f(#p0, o.p0); f(#p1, o.p1);)                                                 \
  };
#include "engine/activations.def"

#undef MT_LAYER_KEYS

// In kLayerTypes' order: these, then the activations in engine/activations.def's order.
using LayerOptions = std::variant<LinearLayer, ReLULayer, GELULayer, SigmoidLayer, TanhLayer,
                                  DropoutLayer, LayerNormLayer, Conv2dLayer, MaxPool2dLayer,
                                  FlattenLayer, Conv1dLayer, AdaptiveAvgPool2dLayer, IdentityLayer,
                                  BatchNorm1dLayer, BatchNorm2dLayer, GroupNormLayer, RMSNormLayer
#define MT_ACTIVATION_ENTRY(name, Module, Math) , Module##Layer
#include "engine/activations.def"
                                  >;

// The `type` of each alternative of LayerOptions, in its order.
inline const std::vector<std::string> kLayerTypes = [] {
  std::vector<std::string> types;
  [&types]<size_t... I>(std::index_sequence<I...>) {
    (types.emplace_back(std::variant_alternative_t<I, LayerOptions>::kType), ...);
  }
  (std::make_index_sequence<std::variant_size_v<LayerOptions>>());
  return types;
}();

}  // namespace mantissa::runner

namespace mantissa::runner::schema {

// The layer keys (runner/config/layer_options.h: the layer structs), in resolved.yaml's order. A
// key whose documentation or checks differ by layer is one row per layer type.
inline const std::vector<VariantKey>& layer_keys() {
  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr Range positive{0, inf, true, false};
  static const std::vector<VariantKey> keys = [&] {
    std::vector<VariantKey> k = {
        {.name = "in",
         .help = "input features (linear, `[..., in]`) or channels (conv2d)",
         .min_int = 1,
         .only = {"linear", "conv2d"},
         .required = true},
        {.name = "out",
         .help = "output features or channels",
         .min_int = 1,
         .only = {"linear", "conv2d"},
         .required = true},
        {.name = "kernel",
         .help = "square kernel size",
         .min_int = 1,
         .only = {"conv2d", "maxpool2d"},
         .required = true},
        {.name = "stride", .help = "stride", .min_int = 1, .only = {"conv2d"}},
        {.name = "stride",
         .help = "stride",
         .min_int = 1,
         .only = {"maxpool2d"},
         .default_from = "kernel"},
        {.name = "padding", .help = "zero padding", .min_int = 0, .only = {"conv2d", "maxpool2d"}},
        {.name = "bias", .help = "learn an additive bias", .only = {"linear", "conv2d"}},
        {.name = "approximate",
         .help = "the tanh approximation of GELU, or none",
         .choices = {"none", "tanh"},
         .only = {"gelu"}},
        {.name = "p",
         .range = Range{0, 1, false, true},
         .help = "probability of zeroing an element; active in training only",
         .only = {"dropout"}},
        {.name = "shape",
         .help = "normalized_shape: the trailing dims normalized (an int or a list)",
         .only = {"layernorm"},
         .required = true},
        {.name = "eps", .range = positive, .help = "added to the variance", .only = {"layernorm"}},
        {.name = "affine",
         .help = "learn elementwise weight and bias (elementwise_affine)",
         .only = {"layernorm"}},
        {.name = "start_dim",
         .help = "first dim flattened; dims count the batch dimension, as `torch.nn.Flatten`",
         .min_int = -8,
         .max_int = 8,
         .only = {"flatten"}},
        {.name = "end_dim",
         .help = "last dim flattened",
         .min_int = -8,
         .max_int = 8,
         .only = {"flatten"}},
        // conv1d ([channels, length] per example) and adaptive_avg_pool2d; identity has no keys.
        {.name = "in",
         .help = "input channels",
         .min_int = 1,
         .only = {"conv1d"},
         .required = true},
        {.name = "out",
         .help = "output channels",
         .min_int = 1,
         .only = {"conv1d"},
         .required = true},
        {.name = "kernel",
         .help = "kernel size",
         .min_int = 1,
         .only = {"conv1d"},
         .required = true},
        {.name = "stride", .help = "stride", .min_int = 1, .only = {"conv1d"}},
        {.name = "padding", .help = "zero padding", .min_int = 0, .only = {"conv1d"}},
        {.name = "bias", .help = "learn an additive bias", .only = {"conv1d"}},
        {.name = "output_size",
         .help = "output height and width (an int for both, or a list [h, w])",
         .only = {"adaptive_avg_pool2d"},
         .required = true},
    };
    // The parameters of the activations of engine/activations.def: a key per parameter.
    const auto activation = [&](const char* type, const char* name, std::string_view constraint,
                                const char* help) {
      k.push_back({.name = name,
                   .range = constraint == "positive" ? positive : Range{},
                   .help = help,
                   .only = {type},
                   .nonzero = constraint == "nonzero"});
    };
#define MT_ACTIVATION1(name, Module, Math, node, policy, p0, d0, c0, r0, doc0) \
  activation(#name, #p0, #c0, doc0);
#define MT_ACTIVATION2(name, Module, Math, node, policy, p0, d0, c0, r0, doc0, p1, d1, c1, r1, \
                       doc1)                                                                   \
  activation(#name, #p0, #c0, doc0);                                                           \
  activation(#name, #p1, #c1, doc1);
#include "engine/activations.def"
    // The normalisation layers of nn/norm.h.
    const std::vector<VariantKey> norms = {
        {.name = "features",
         .help = "channels: num_features (batchnorm) or num_channels (groupnorm)",
         .min_int = 1,
         .only = {"batchnorm1d", "batchnorm2d", "groupnorm"},
         .required = true},
        {.name = "groups",
         .help = "num_groups: the channels are normalised in this many groups",
         .min_int = 1,
         .only = {"groupnorm"},
         .required = true},
        {.name = "momentum",
         .range = Range{0, 1, true, false},
         .help = "weight of each batch in the running mean and variance",
         .only = {"batchnorm1d", "batchnorm2d"}},
        {.name = "eps",
         .range = positive,
         .help = "added to the variance",
         .only = {"batchnorm1d", "batchnorm2d", "groupnorm"}},
        {.name = "eps",
         .range = positive,
         .help = "added to the mean square",
         .default_text = "float32's machine epsilon",
         .only = {"rmsnorm"}},
        {.name = "affine",
         .help = "learn per-channel weight and bias (rmsnorm: weight only)",
         .only = {"batchnorm1d", "batchnorm2d", "groupnorm", "rmsnorm"}},
        {.name = "shape",
         .help = "normalized_shape: the trailing dims normalized (an int or a list)",
         .only = {"rmsnorm"},
         .required = true},
    };
    k.insert(k.end(), norms.begin(), norms.end());
    return k;
  }();
  return keys;
}

}  // namespace mantissa::runner::schema
