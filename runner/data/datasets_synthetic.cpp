// Synthetic datasets: teacher-network regression, sine regression and two spirals. Each draws
// from its own Philox generator (engine/generator.h) seeded by its options, so a dataset is the
// same on every machine and does not disturb the global generators; the arithmetic is done on the
// host in double, so global matmul-precision or autocast settings cannot change the data.
#include <cmath>
#include <numbers>

#include "engine/error.h"
#include "engine/factory.h"
#include "runner/data/data.h"

namespace mantissa::runner {

namespace {

std::vector<float> normal_values(int64_t n, Generator& gen) {
  return randn({n}, DType::Float32, &gen).to_vector<float>();
}
std::vector<float> uniform_values(int64_t n, Generator& gen) {
  return rand({n}, DType::Float32, &gen).to_vector<float>();
}

void check_positive(const char* what, const char* key, int64_t v) {
  MT_CHECK(v > 0, what, ": ", key, " must be positive, got ", v);
}

}  // namespace

std::shared_ptr<TensorDataset> make_teacher_dataset(const TeacherOptions& o) {
  check_positive("teacher dataset", "samples", o.samples);
  check_positive("teacher dataset", "in_features", o.in_features);
  check_positive("teacher dataset", "hidden", o.hidden);
  check_positive("teacher dataset", "out_features", o.out_features);
  MT_CHECK(o.noise >= 0.0, "teacher dataset: noise must be >= 0, got ", o.noise);
  Generator gen(o.seed);
  const int64_t n = o.samples, in = o.in_features, h = o.hidden, out = o.out_features;
  // The teacher first (so its weights do not depend on the sample count), scaled like a
  // variance-preserving init so targets are O(1).
  const auto w1 = normal_values(h * in, gen), b1 = normal_values(h, gen);
  const auto w2 = normal_values(out * h, gen), b2 = normal_values(out, gen);
  const auto x = normal_values(n * in, gen);
  const auto eps = o.noise > 0.0 ? normal_values(n * out, gen) : std::vector<float>();
  const double s1 = std::sqrt(2.0 / static_cast<double>(in));
  const double s2 = 1.0 / std::sqrt(static_cast<double>(h));
  std::vector<float> y(n * out);
  std::vector<double> hidden(h);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < h; ++j) {
      double acc = 0.1 * b1[j];
      for (int64_t k = 0; k < in; ++k) acc += s1 * w1[j * in + k] * x[r * in + k];
      hidden[j] = acc > 0.0 ? acc : 0.0;
    }
    for (int64_t j = 0; j < out; ++j) {
      double acc = 0.1 * b2[j];
      for (int64_t k = 0; k < h; ++k) acc += s2 * w2[j * h + k] * hidden[k];
      if (o.noise > 0.0) acc += o.noise * eps[r * out + j];
      y[r * out + j] = static_cast<float>(acc);
    }
  }
  return std::make_shared<TensorDataset>(from_vector(x, Shape{n, in}),
                                         from_vector(y, Shape{n, out}), "teacher regression");
}

std::shared_ptr<TensorDataset> make_sine_dataset(const SineOptions& o) {
  check_positive("sine dataset", "samples", o.samples);
  MT_CHECK(o.x_min < o.x_max, "sine dataset: x_min (", o.x_min, ") must be below x_max (", o.x_max,
           ")");
  MT_CHECK(o.noise >= 0.0, "sine dataset: noise must be >= 0, got ", o.noise);
  Generator gen(o.seed);
  const int64_t n = o.samples;
  const auto u = uniform_values(n, gen);
  const auto eps = o.noise > 0.0 ? normal_values(n, gen) : std::vector<float>();
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    const double xi = o.x_min + (o.x_max - o.x_min) * u[i];
    x[i] = static_cast<float>(xi);
    y[i] = static_cast<float>(std::sin(xi) + (o.noise > 0.0 ? o.noise * eps[i] : 0.0));
  }
  return std::make_shared<TensorDataset>(from_vector(x, Shape{n, 1}), from_vector(y, Shape{n, 1}),
                                         "sine regression");
}

std::shared_ptr<TensorDataset> make_spirals_dataset(const SpiralsOptions& o) {
  check_positive("spirals dataset", "samples", o.samples);
  MT_CHECK(o.noise >= 0.0, "spirals dataset: noise must be >= 0, got ", o.noise);
  MT_CHECK(o.turns > 0.0, "spirals dataset: turns must be positive, got ", o.turns);
  Generator gen(o.seed);
  const int64_t n = o.samples;
  const auto u = uniform_values(n, gen);
  const auto eps = normal_values(2 * n, gen);
  std::vector<float> x(2 * n);
  std::vector<int64_t> label(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i % 2;
    // Radius grows with the angle; the second spiral is the first rotated by pi. The sqrt keeps
    // the point density even along the arm.
    const double t = 0.05 + 0.95 * std::sqrt(static_cast<double>(u[i]));
    const double angle =
        t * o.turns * 2.0 * std::numbers::pi + static_cast<double>(c) * std::numbers::pi;
    x[2 * i] = static_cast<float>(t * std::cos(angle) + o.noise * eps[2 * i]);
    x[2 * i + 1] = static_cast<float>(t * std::sin(angle) + o.noise * eps[2 * i + 1]);
    label[i] = c;
  }
  return std::make_shared<TensorDataset>(from_vector(x, Shape{n, 2}), from_vector(label, Shape{n}),
                                         "two spirals");
}

}  // namespace mantissa::runner
