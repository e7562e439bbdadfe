// How a float8 linear layer (mt::float8_linear in engine/ops.def) casts the operands of its three
// matrix products, with torchao's semantics (torchao/float8/config.py, Float8LinearConfig):
//   output      = input       @ weight^T
//   grad_input  = grad_output @ weight
//   grad_weight = grad_output^T @ input
// Each operand of each product has a cast: its scaling (Disabled keeps the product in the high
// precision; both operands of one product must agree) and its float8 format. Rowwise scales
// each row of the operand as that product reads it (torchao's "axiswise": one scale per row of
// the left operand, per column of the right one).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "engine/dtype.h"

namespace mantissa {

enum class Float8Scaling : uint8_t { Disabled, Tensorwise, Rowwise };

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
  bool operator==(const Float8LinearConfig&) const = default;

  // torchao's Float8LinearConfig.from_recipe_name: "tensorwise", "rowwise" or
  // "rowwise_with_gw_hp"; throws for another name, listing these.
  static Float8LinearConfig from_recipe(std::string_view name);
  // Throws unless each product's two operands are both float8 or both high precision, and each
  // operand has one float8 dtype in both products that read it (torchao's rules).
  void validate(const char* op) const;
};

// The recipe names from_recipe takes, space-separated.
inline constexpr const char* kFloat8Recipes = "tensorwise rowwise rowwise_with_gw_hp";

const char* float8_scaling_name(Float8Scaling s);

}  // namespace mantissa
