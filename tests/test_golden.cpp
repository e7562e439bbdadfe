// fp32 training trajectories against PyTorch: same initial weights and data, the loss at every
// one of 100 steps within 1e-5 relative. The reference numbers come from
// scripts/golden/make_trajectories.py (committed in tests/golden/trajectories.txt).
#include <map>

#include "golden_file.h"
#include "test_util.h"

namespace mt = mantissa;

namespace {

struct GoldenRun {
  std::string name;
  std::map<std::string, std::string> options;
  std::vector<std::pair<std::string, mt::Tensor>> tensors;
  std::vector<double> losses;
  int steps = 0;
};

std::vector<GoldenRun> load_runs() {
  mt::testing::GoldenFormat format;
  format.case_kind = "run";
  format.value_kinds = {"losses"};
  std::vector<GoldenRun> runs;
  for (const auto& [name, c] : mt::testing::read_golden_file("trajectories.txt", format)) {
    GoldenRun& run = runs.emplace_back();
    run.name = name;
    for (const std::string& kv : c.header) {
      const auto eq = kv.find('=');
      run.options[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    run.steps = std::stoi(run.options["steps"]);
    // The file holds float32 values as %.9g: the nearest 9-digit decimal lies far closer to
    // the float than to a rounding midpoint, so reading it as a double and rounding once more
    // gives back the float exactly.
    for (const auto& t : c.tensors) run.tensors.emplace_back(t.name, t.f64().to(mt::kFloat32));
    run.losses = c.first("losses");
  }
  return runs;
}

mt::Tensor find(const GoldenRun& run, const std::string& name) {
  for (const auto& [n, t] : run.tensors)
    if (n == name) return t;
  ADD_FAILURE() << "run " << run.name << " has no tensor " << name;
  return {};
}

std::shared_ptr<mt::nn::SequentialImpl> make_model(const GoldenRun& run) {
  if (run.name.rfind("toy", 0) == 0) {
    return std::make_shared<mt::nn::SequentialImpl>(mt::nn::Linear(10, 10), mt::nn::ReLU(),
                                                    mt::nn::Linear(10, 5));
  }
  return std::make_shared<mt::nn::SequentialImpl>(mt::nn::Linear(16, 32), mt::nn::ReLU(),
                                                  mt::nn::Linear(32, 32), mt::nn::Tanh(),
                                                  mt::nn::Linear(32, 4));
}

std::unique_ptr<mt::optim::Optimizer> make_optimizer(const GoldenRun& run,
                                                     std::vector<mt::Tensor> params) {
  const double lr = std::stod(run.options.at("lr"));
  if (run.options.at("optimizer") == "adam") {
    mt::optim::AdamOptions o;
    o.lr = lr;
    return std::make_unique<mt::optim::Adam>(std::move(params), o);
  }
  mt::optim::SGDOptions o;
  if (run.options.count("momentum")) o.momentum = std::stod(run.options.at("momentum"));
  return std::make_unique<mt::optim::SGD>(std::move(params), lr, o);
}

}  // namespace

TEST(Golden, TrajectoriesMatchPyTorch) {
  const auto runs = load_runs();
  ASSERT_EQ(runs.size(), 5u);
  for (const GoldenRun& run : runs) {
    SCOPED_TRACE(run.name);
    auto model = make_model(run);
    mt::nn::StateDict init;
    for (const auto& [name, t] : run.tensors)
      if (name.rfind("param:", 0) == 0) init.insert(name.substr(6), t);
    model->load_state_dict(init);
    auto optimizer = make_optimizer(run, model->parameters());
    mt::nn::MSELoss loss_fn;
    ASSERT_EQ(run.losses.size(), static_cast<size_t>(run.steps));
    const int batches = static_cast<int>((run.tensors.size() - init.size()) / 2);
    for (int step = 0; step < run.steps; ++step) {
      optimizer->zero_grad();
      const auto x = find(run, "x:" + std::to_string(step % batches));
      const auto y = find(run, "y:" + std::to_string(step % batches));
      auto loss = loss_fn(model->forward(x), y);
      loss.backward();
      optimizer->step();
      const double got = loss.item<float>(), want = run.losses[step];
      ASSERT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << step;
    }
  }
}
