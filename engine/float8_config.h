// How a float8 linear layer (mt::float8_linear in engine/ops.def) casts the operands of its three
// matrix products, with torchao's semantics (torchao/float8/config.py, Float8LinearConfig):
//   output      = input       @ weight^T
//   grad_input  = grad_output @ weight
//   grad_weight = grad_output^T @ input
// Each operand of each product has a cast: its scaling (Disabled keeps the product in the high
// precision; both operands of one product must agree) and its float8 format. Rowwise scales
// each row of the operand as that product reads it (torchao's "axiswise": one scale per row of
// the left operand, per column of the right one). Delayed scales each operand as a whole by a
// scale kept from earlier steps (Transformer Engine's DelayedScaling): the layer holds an amax
// history and the scales, and nn::update_float8_scales moves them on after each step.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/dtype.h"

namespace mantissa {

enum class Float8Scaling : uint8_t { Disabled, Tensorwise, Rowwise, Delayed };

// Which amax of the history a delayed scale is made from (TE's amax_compute_algo).
enum class Float8AmaxAlgo : uint8_t { Max, MostRecent };

// Transformer Engine's DelayedScaling recipe, with its defaults: after each step the scale of
// each tensor becomes (fp8_max / 2^margin) / amax, amax the largest of the last
// amax_history_len steps' absolute maxima (Max) or the last one (MostRecent); a scale whose amax
// is 0 or not finite stays as it was.
struct Float8DelayedScaling {
  int64_t amax_history_len = 1024;
  Float8AmaxAlgo amax_compute_algo = Float8AmaxAlgo::Max;
  double margin = 0.0;
  bool operator==(const Float8DelayedScaling&) const = default;
};

struct Float8Cast {
  Float8Scaling scaling = Float8Scaling::Tensorwise;
  DType dtype = kFloat8E4M3FN;
  bool operator==(const Float8Cast&) const = default;
};

struct Float8LinearConfig {
  // torchao's defaults (the tensorwise recipe): e4m3 forward, e5m2 gradients.
  Float8Cast input{};
  Float8Cast weight{};
  Float8Cast grad_output{Float8Scaling::Tensorwise, kFloat8E5M2};
  Float8Cast input_for_grad_weight{};
  Float8Cast weight_for_grad_input{};
  Float8Cast grad_output_for_grad_weight{Float8Scaling::Tensorwise, kFloat8E5M2};
  // Rounds every scale down to a power of two (exact to apply and to invert).
  bool round_scales_to_power_of_2 = false;
  // Read when the casts are Delayed (all of them are, or none).
  Float8DelayedScaling delayed{};
  bool operator==(const Float8LinearConfig&) const = default;

  bool is_delayed() const { return input.scaling == Float8Scaling::Delayed; }

  // torchao's Float8LinearConfig.from_recipe_name: "tensorwise", "rowwise" or
  // "rowwise_with_gw_hp"; or "delayed", TE's DelayedScaling with its HYBRID format (e4m3 input
  // and weight, e5m2 gradient); throws for another name, listing these.
  static Float8LinearConfig from_recipe(std::string_view name);
  // Throws unless each product's two operands are both float8 or both high precision, and each
  // operand has one float8 dtype in both products that read it (torchao's rules), and unless
  // delayed scaling is all or nothing, with a history of at least one step and a margin in
  // [0, 64].
  void validate(const char* op) const;
};

// The recipe names from_recipe takes, space-separated.
inline constexpr const char* kFloat8Recipes = "tensorwise rowwise rowwise_with_gw_hp delayed";

// The largest finite value of a float8 dtype: 448 (float8_e4m3fn), 57344 (float8_e5m2).
float float8_max(DType dtype);

const char* float8_scaling_name(Float8Scaling s);
const char* float8_amax_algo_name(Float8AmaxAlgo a);  // "max", "most_recent"

}  // namespace mantissa
