// Float8 training as a precision policy: the Linear layers of any model run their three products
// in float8 (torchao's convert_to_float8_training, without swapping modules: each converted
// nn::Linear keeps its parameters and runs float8_linear, engine/ops.def).
//
// Delayed scaling (Transformer Engine's DelayedScaling) keeps state in each layer: an amax
// history and the scales made from it. The forward and backward record each operand's absolute
// maximum; update_float8_scales, called once after every optimizer step (the Trainer does), makes
// the next step's scales from the history and moves the history on (torchao's former
// sync_float8_amax_and_scale_history).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nn/layers.h"

namespace mantissa::nn {

// Which Linear layers to convert: the layer's qualified name (as named_modules gives it) and the
// layer. The default takes a layer whose in_features and out_features are multiples of 16, the
// shapes cuBLASLt's float8 GEMM takes.
using Float8Filter = std::function<bool(const std::string& name, const LinearImpl& layer)>;
bool float8_dims_ok(const std::string& name, const LinearImpl& layer);

// Sets `config` on every nn::Linear under `root` (root included) that `filter` takes, and
// returns their names; the others are left as they are. Converting again replaces the config.
// A delayed config gives each layer a fresh state: a zero history and scales of 1 (TE's start).
std::vector<std::string> convert_to_float8_training(Module& root,
                                                    const Float8LinearConfig& config = {},
                                                    const Float8Filter& filter = float8_dims_ok);

// Combines the step's absolute maxima of all delayed layers over data-parallel ranks, in place:
// given a float32 [layers, 3] tensor, leaves every rank with the elementwise maximum (a max
// all-reduce; TE's reduce_amax), so every rank makes the same scales.
using AmaxReduce = std::function<void(Tensor& amaxes)>;

// TE's amax_and_scale_update for every layer under `root` with delayed scaling, after
// `reduce_amax` (when given) has combined the step's maxima (row 0 of each history):
//   amax  = the largest value of the history (Max) or its row 0 (MostRecent)
//   scale = (fp8_max / 2^margin) / amax where amax is finite and > 0, else unchanged (and the
//           largest finite float32 where that quotient overflows)
//   history rolled by one step (row i takes row i+1, the last row takes row 0), row 0 zeroed.
// No host reads. Returns the number of layers updated.
int64_t update_float8_scales(Module& root, const AmaxReduce& reduce_amax = {});

// The layers with delayed scaling under `root`, by qualified name.
std::vector<std::pair<std::string, LinearImpl*>> float8_delayed_layers(Module& root);

// Float8 health, on request: with tracking on, each float8 layer counts, for its input, weight
// and output gradient, the values its casts saturated (beyond the format's largest after
// scaling) and flushed to zero, and keeps the largest absolute value, until they are taken.
void track_float8_stats(Module& root, bool on = true);

inline constexpr const char* kFloat8TensorNames[3] = {"input", "weight", "grad_output"};
struct Float8TensorStats {
  double amax = 0.0;
  double scale = 0.0;  // delayed scaling: the scale made for the next step; 0 otherwise
  int64_t saturated = 0;
  int64_t flushed = 0;
};
struct Float8LayerStats {
  std::string layer;
  Float8TensorStats tensors[3];  // input, weight, grad_output (kFloat8TensorNames)
};
// The tracked layers' stats since the last take (a host read per layer), zeroed for the next.
std::vector<Float8LayerStats> take_float8_stats(Module& root);

}  // namespace mantissa::nn
