#include "nn/float8.h"

#include <cmath>
#include <limits>
#include <memory>

#include "autograd/node.h"

namespace mantissa::nn {

bool float8_dims_ok(const std::string& /*name*/, const LinearImpl& layer) {
  return layer.in_features % 16 == 0 && layer.out_features % 16 == 0;
}

std::vector<std::string> convert_to_float8_training(Module& root, const Float8LinearConfig& config,
                                                    const Float8Filter& filter) {
  config.validate("convert_to_float8_training");
  std::vector<std::string> converted;
  for (const auto& [name, module] : root.named_modules()) {
    auto* linear = dynamic_cast<LinearImpl*>(module.get());
    if (linear == nullptr || !filter(name, *linear)) continue;
    linear->float8 = config;
    linear->float8_amax_history = Tensor();
    linear->float8_scale = Tensor();
    if (config.is_delayed()) {
      const auto opts = TensorOptions(linear->weight.device()).dtype(kFloat32);
      linear->float8_amax_history = zeros(Shape{config.delayed.amax_history_len, 3}, opts);
      linear->float8_scale = ones(Shape{3}, opts);
    }
    converted.push_back(name);
  }
  return converted;
}

namespace {

// The converted Linear layers under `root` (a float8 config set), by qualified name.
std::vector<std::pair<std::string, LinearImpl*>> float8_layers(Module& root) {
  std::vector<std::pair<std::string, LinearImpl*>> out;
  for (const auto& [name, module] : root.named_modules()) {
    auto* linear = dynamic_cast<LinearImpl*>(module.get());
    if (linear != nullptr && linear->float8) out.emplace_back(name, linear);
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, LinearImpl*>> float8_delayed_layers(Module& root) {
  auto layers = float8_layers(root);
  std::erase_if(layers, [](const auto& l) { return !l.second->float8->is_delayed(); });
  return layers;
}

void track_float8_stats(Module& root, bool on) {
  for (const auto& [name, linear] : float8_layers(root)) {
    linear->float8_stats =
        on ? zeros(Shape{3, 3}, TensorOptions(linear->weight.device()).dtype(kFloat64)) : Tensor();
  }
}

std::vector<Float8LayerStats> take_float8_stats(Module& root) {
  std::vector<Float8LayerStats> out;
  autograd::NoGradGuard no_grad;
  for (const auto& [name, linear] : float8_layers(root)) {
    if (!linear->float8_stats.defined()) continue;
    const std::vector<double> v = linear->float8_stats.cpu().to_vector<double>();
    linear->float8_stats.zero_();
    std::vector<float> scale(3, 0.0f);
    if (linear->float8_scale.defined()) scale = linear->float8_scale.cpu().to_vector<float>();
    Float8LayerStats s;
    s.layer = name;
    for (int r = 0; r < 3; ++r) {
      s.tensors[r].amax = v[3 * r];
      s.tensors[r].scale = scale[r];
      s.tensors[r].saturated = static_cast<int64_t>(v[3 * r + 1]);
      s.tensors[r].flushed = static_cast<int64_t>(v[3 * r + 2]);
    }
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// One layer's update (see update_float8_scales), in float32 as TE computes it.
void update_layer(LinearImpl& layer) {
  const Float8LinearConfig& c = *layer.float8;
  Tensor& history = layer.float8_amax_history;
  const int64_t len = history.size(0);
  const Tensor amax = c.delayed.amax_compute_algo == Float8AmaxAlgo::Max
                          ? mantissa::amax(history, Shape{0})
                          : history.select(0, 0).clone();
  const float shrink = std::pow(2.0f, -static_cast<float>(c.delayed.margin));
  Tensor scaled_max = full(Shape{3}, float8_max(c.input.dtype) * shrink,
                           TensorOptions(history.device()).dtype(kFloat32));
  scaled_max.narrow(0, 1, 1).fill_(float8_max(c.weight.dtype) * shrink);
  scaled_max.narrow(0, 2, 1).fill_(float8_max(c.grad_output.dtype) * shrink);
  const Tensor usable = logical_and(isfinite(amax), amax > zeros_like(amax));
  Tensor next = where(usable, scaled_max / amax, layer.float8_scale);
  next.masked_fill_(isinf(next), std::numeric_limits<float>::max());
  layer.float8_scale.copy_(next);
  if (len > 1) history.copy_(cat({history.narrow(0, 1, len - 1), history.narrow(0, 0, 1)}, 0));
  history.narrow(0, 0, 1).zero_();
}

}  // namespace

int64_t update_float8_scales(Module& root, const AmaxReduce& reduce_amax) {
  const auto layers = float8_delayed_layers(root);
  if (layers.empty()) return 0;
  autograd::NoGradGuard no_grad;
  for (const auto& [name, l] : layers) {
    MT_CHECK(l->float8_amax_history.defined() && l->float8_scale.defined(),
             "update_float8_scales: layer '", name,
             "' has a delayed-scaling config but no state (set it with "
             "convert_to_float8_training)");
  }
  if (reduce_amax) {
    std::vector<Tensor> rows;
    for (const auto& [name, l] : layers) rows.push_back(l->float8_amax_history.narrow(0, 0, 1));
    Tensor all = cat(rows, 0);
    reduce_amax(all);
    MT_CHECK(all.shape() == Shape({static_cast<int64_t>(layers.size()), 3}),
             "update_float8_scales: reduce_amax changed the maxima's shape to ", all.shape());
    for (size_t i = 0; i < layers.size(); ++i)
      layers[i].second->float8_amax_history.narrow(0, 0, 1).copy_(
          all.narrow(0, static_cast<int64_t>(i), 1));
  }
  for (const auto& [name, l] : layers) update_layer(*l);
  return static_cast<int64_t>(layers.size());
}

}  // namespace mantissa::nn
