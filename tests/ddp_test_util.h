// What test_ddp and test_ddp_single share: a small model, deterministic data and comparisons.
#pragma once

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "dist_test_util.h"
#include "test_util.h"

namespace mantissa::testing::ddp {

namespace mt = mantissa;
namespace dist = mantissa::distributed;
namespace nn = mantissa::nn;
using mt::Tensor;

// Two linear layers and a tanh; `extra` is used only when a scenario asks for it, `unused` never.
struct Net : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  Tensor extra, unused, running;
  bool use_extra = false;
  explicit Net(bool with_spare = false) {
    fc1 = register_module("fc1", nn::Linear(6, 8));
    fc2 = register_module("fc2", nn::Linear(8, 3));
    if (with_spare) {
      extra = register_parameter("extra", mt::zeros({3}));
      unused = register_parameter("unused", mt::ones({2}));
    }
    running = register_buffer("running", mt::zeros({3}));
  }
  Tensor forward(const Tensor& x) {
    Tensor y = fc2(fc1(x).tanh());
    if (use_extra) y = y + extra;
    return y;
  }
};

// Deterministic data: micro-batch `part` of step `step`, `rows` rows.
inline Tensor inputs(int step, int part, int64_t rows) {
  std::vector<float> v(rows * 6);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(std::sin(0.37 * double(step * 1000 + part * 100 + int(i))));
  return mt::from_vector(v, mt::Shape{rows, 6});
}
inline Tensor targets(int step, int part, int64_t rows) {
  std::vector<float> v(rows * 3);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(std::cos(0.53 * double(step * 1000 + part * 100 + int(i))));
  return mt::from_vector(v, mt::Shape{rows, 3});
}

// Rank-dependent initial weights, so that the construction's broadcast matters.
inline std::shared_ptr<Net> make_net(int seed, bool with_spare = false) {
  mt::manual_seed(static_cast<uint64_t>(100 + seed));
  return std::make_shared<Net>(with_spare);
}

inline std::shared_ptr<dist::ProcessGroup> init(
    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  dist::InitOptions o;
  o.timeout = timeout;
  return dist::init_process_group(o);
}

inline std::vector<float> flat_params(const nn::Module& m) {
  std::vector<float> out;
  for (const Tensor& p : m.parameters()) {
    const auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Fails unless every rank's parameters are bitwise rank 0's.
inline void expect_same_on_every_rank(Report& r, dist::ProcessGroup& pg, const nn::Module& m,
                                      const std::string& when) {
  const auto mine = flat_params(m);
  Tensor all = mt::zeros({pg.size() * static_cast<int64_t>(mine.size())});
  pg.allgather(all, mt::from_vector(mine))->wait();
  const auto v = all.to_vector<float>();
  for (int q = 0; q < pg.size(); ++q) {
    const std::vector<float> theirs(v.begin() + q * mine.size(), v.begin() + (q + 1) * mine.size());
    if (!bitwise_equal(theirs, mine))
      r.fail(when + ": rank " + std::to_string(q) + "'s parameters differ from rank " +
             std::to_string(pg.rank()) + "'s");
  }
}

inline Tensor loss_of(const Tensor& out, const Tensor& y) {
  return nn::functional::mse_loss(out, y);
}

}  // namespace mantissa::testing::ddp
