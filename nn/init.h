// nn::init: in-place initialisers with PyTorch's formulas (no autograd history recorded).
#pragma once

#include <string_view>
#include <utility>

#include "engine/factory.h"
#include "engine/tensor.h"

namespace mantissa::nn::init {

// fan_in and fan_out of a weight ([out, in, *kernel]), as
// torch.nn.init._calculate_fan_in_and_fan_out.
std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t);
// Gain for a nonlinearity: "linear", "sigmoid", "tanh", "relu", "leaky_relu" (with param).
double calculate_gain(std::string_view nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// mode: "fan_in" or "fan_out".
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, std::string_view mode = "fan_in",
                         std::string_view nonlinearity = "leaky_relu", Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, std::string_view mode = "fan_in",
                        std::string_view nonlinearity = "leaky_relu", Generator* gen = nullptr);

}  // namespace mantissa::nn::init
