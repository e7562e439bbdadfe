#include "engine/float8_config.h"

#include <cmath>

#include "engine/error.h"

namespace mantissa {

float float8_max(DType dtype) {
  MT_CHECK(is_float8(dtype), "float8_max: expected a float8 dtype, got ", dtype);
  return dtype == kFloat8E4M3FN ? Float8E4M3FN::kMax : Float8E5M2::kMax;
}

const char* float8_scaling_name(Float8Scaling s) {
  switch (s) {
    case Float8Scaling::Disabled:
      return "disabled";
    case Float8Scaling::Tensorwise:
      return "tensorwise";
    case Float8Scaling::Rowwise:
      return "rowwise";
    case Float8Scaling::Delayed:
      return "delayed";
  }
  return "?";
}

const char* float8_amax_algo_name(Float8AmaxAlgo a) {
  return a == Float8AmaxAlgo::Max ? "max" : "most_recent";
}

Float8LinearConfig Float8LinearConfig::from_recipe(std::string_view name) {
  constexpr Float8Cast kRowE4M3{Float8Scaling::Rowwise, kFloat8E4M3FN};
  Float8LinearConfig c;
  if (name == "tensorwise") return c;
  if (name == "rowwise") {
    c.input = c.weight = c.grad_output = kRowE4M3;
    c.input_for_grad_weight = c.weight_for_grad_input = c.grad_output_for_grad_weight = kRowE4M3;
    c.round_scales_to_power_of_2 = true;
    return c;
  }
  if (name == "rowwise_with_gw_hp") {
    // The output and grad_input products in float8 with row scales (the weight tensorwise for
    // grad_input); grad_weight in the high precision.
    c.input = c.weight = c.grad_output = kRowE4M3;
    c.weight_for_grad_input = Float8Cast{Float8Scaling::Tensorwise, kFloat8E4M3FN};
    c.input_for_grad_weight = Float8Cast{Float8Scaling::Disabled, kFloat8E4M3FN};
    c.grad_output_for_grad_weight = Float8Cast{Float8Scaling::Disabled, kFloat8E4M3FN};
    c.round_scales_to_power_of_2 = true;
    return c;
  }
  if (name == "delayed") {
    constexpr Float8Cast kDelayedE4M3{Float8Scaling::Delayed, kFloat8E4M3FN};
    constexpr Float8Cast kDelayedE5M2{Float8Scaling::Delayed, kFloat8E5M2};
    c.input = c.weight = c.input_for_grad_weight = c.weight_for_grad_input = kDelayedE4M3;
    c.grad_output = c.grad_output_for_grad_weight = kDelayedE5M2;
    return c;
  }
  MT_THROW("float8: unknown recipe '", std::string(name), "' (expected one of: ", kFloat8Recipes,
           ")");
}

void Float8LinearConfig::validate(const char* op) const {
  auto check = [op](const Float8Cast& a, const Float8Cast& b, const char* product) {
    MT_CHECK((a.scaling == Float8Scaling::Disabled) == (b.scaling == Float8Scaling::Disabled), op,
             ": the ", product, " product needs both operands in float8 or both in high ",
             "precision, got scalings ", float8_scaling_name(a.scaling), " and ",
             float8_scaling_name(b.scaling));
    for (const Float8Cast* c : {&a, &b})
      MT_CHECK(is_float8(c->dtype), op, ": a float8 cast needs a float8 dtype, got ", c->dtype);
  };
  // torchao's rule: an operand has one float8 format in both products that read it.
  auto same_format = [op](const Float8Cast& a, const Float8Cast& b, const char* operand) {
    MT_CHECK(a.dtype == b.dtype, op, ": the ", operand, " must be cast to one float8 dtype in ",
             "both products it is used in, got ", a.dtype, " and ", b.dtype);
  };
  same_format(input, input_for_grad_weight, "input");
  same_format(weight, weight_for_grad_input, "weight");
  same_format(grad_output, grad_output_for_grad_weight, "grad_output");
  check(input, weight, "output");
  check(grad_output, weight_for_grad_input, "grad_input");
  check(grad_output_for_grad_weight, input_for_grad_weight, "grad_weight");
  // The layer keeps one delayed scale per tensor, used by every product that reads it.
  int delayed_casts = 0;
  for (const Float8Cast* c : {&input, &weight, &grad_output, &input_for_grad_weight,
                              &weight_for_grad_input, &grad_output_for_grad_weight})
    delayed_casts += c->scaling == Float8Scaling::Delayed ? 1 : 0;
  MT_CHECK(delayed_casts == 0 || delayed_casts == 6, op,
           ": delayed scaling must scale every operand of the three products (", delayed_casts,
           " of 6 casts are delayed)");
  if (delayed_casts == 0) return;
  MT_CHECK(delayed.amax_history_len >= 1, op,
           ": delayed scaling needs an amax history of at least 1 step, got ",
           delayed.amax_history_len);
  // Past 64 the scaled maximum heads for float32's underflow (a margin of 150 makes it 0).
  MT_CHECK(delayed.margin >= 0 && delayed.margin <= 64, op,
           ": delayed scaling needs a margin in [0, 64], got ", delayed.margin);
}

}  // namespace mantissa
