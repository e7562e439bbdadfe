#include "nn/init.h"

#include <cmath>

#include "autograd/node.h"

namespace mantissa::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& t) {
  MT_CHECK(t.dim() >= 2,
           "init: fan in and fan out can not be computed for a tensor with fewer "
           "than 2 dimensions (shape ",
           t.shape(), ")");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(std::string_view nl, double param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "sigmoid") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  MT_THROW("calculate_gain: unsupported nonlinearity '", nl, "'");
}

// Writes through a detached alias: initialisers are not part of the graph.
Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  Tensor d = t.detach();
  mantissa::uniform_(d, low, high, gen);
  return t;
}
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  Tensor d = t.detach();
  mantissa::normal_(d, mean, std, gen);
  return t;
}
Tensor& constant_(Tensor& t, double value) {
  Tensor d = t.detach();
  autograd::NoGradGuard no_grad;
  d.fill_(value);
  return t;
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double a = gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)) * std::sqrt(3.0);
  return init::uniform_(t, -a, a, gen);
}
Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)), gen);
}

namespace {
double kaiming_std(const Tensor& t, double a, std::string_view mode, std::string_view nl) {
  MT_CHECK(mode == "fan_in" || mode == "fan_out",
           "kaiming init: mode must be 'fan_in' or "
           "'fan_out', got '",
           mode, "'");
  auto [fan_in, fan_out] = fan_in_and_fan_out(t);
  const double fan = static_cast<double>(mode == "fan_in" ? fan_in : fan_out);
  return calculate_gain(nl, a) / std::sqrt(fan);
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, std::string_view mode, std::string_view nl,
                         Generator* gen) {
  const double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return init::uniform_(t, -bound, bound, gen);
}
Tensor& kaiming_normal_(Tensor& t, double a, std::string_view mode, std::string_view nl,
                        Generator* gen) {
  return init::normal_(t, 0.0, kaiming_std(t, a, mode, nl), gen);
}

}  // namespace mantissa::nn::init
