// The runner's Trainer used from C++ directly, without a YAML config: the ToyModel (Linear(10,10)
// -> ReLU -> Linear(10,5)) learns a random teacher network, with a validation split, Adam, a
// cosine schedule with warmup, gradient clipping and mixed precision.
//   trainer_cpp [--precision float32|tf32|float16|bfloat16] [--epochs N] [--run-dir DIR]
//               [--resume CHECKPOINT]
// With --run-dir the run directory gets metrics.jsonl, train.log, checkpoints/ and summary.json
// (the same files `mantissa train` writes); --resume continues a run from one of its checkpoints.
#include <mantissa.h>

#include <cstring>
#include <iostream>
#include <string>

#include "runner/data/data.h"
#include "runner/training/trainer.h"

namespace mt = mantissa;
namespace runner = mantissa::runner;

struct ToyModel : mt::nn::Module {
  mt::nn::Linear net1{nullptr}, net2{nullptr};
  mt::nn::ReLU relu;
  ToyModel() : mt::nn::Module("ToyModel") {
    net1 = register_module("net1", mt::nn::Linear(10, 10));
    relu = register_module("relu", mt::nn::ReLU());
    net2 = register_module("net2", mt::nn::Linear(10, 5));
  }
  mt::Tensor forward(const mt::Tensor& x) { return net2(relu(net1(x))); }
};

int main(int argc, char** argv) {
  std::string precision = "float32", run_dir, resume;
  int64_t epochs = 20;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--precision") && has_value) {
      precision = argv[++i];
    } else if (!std::strcmp(argv[i], "--epochs") && has_value) {
      epochs = std::stoll(argv[++i]);
    } else if (!std::strcmp(argv[i], "--run-dir") && has_value) {
      run_dir = argv[++i];
    } else if (!std::strcmp(argv[i], "--resume") && has_value) {
      resume = argv[++i];
    } else {
      std::cout << "usage: trainer_cpp [--precision float32|tf32|float16|bfloat16] [--epochs N] "
                   "[--run-dir DIR] [--resume CHECKPOINT]\n";
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  try {
    mt::manual_seed(0);  // the model's initial weights
    const mt::Device device = mt::try_gpu();

    // Data: 2048 examples from a fixed random teacher MLP, 10% held out for validation.
    auto data = runner::make_teacher_dataset({.samples = 2048, .noise = 0.01, .seed = 1});
    auto split = runner::random_split(data, 0.1, /*seed=*/2);
    auto train = std::make_shared<runner::DataLoader>(
        split.train, runner::DataLoaderOptions{.batch_size = 64, .shuffle = true, .seed = 3});
    auto val = std::make_shared<runner::DataLoader>(
        split.val, runner::DataLoaderOptions{.batch_size = 256, .shuffle = false});

    auto model = std::make_shared<ToyModel>();
    auto opt =
        std::make_shared<mt::optim::Adam>(model->parameters(), mt::optim::AdamOptions{.lr = 1e-2});
    const int64_t total_steps = epochs * train->batches_per_epoch();
    auto schedule = std::make_shared<mt::optim::CosineWarmupLR>(*opt, /*warmup_steps=*/20,
                                                                total_steps, /*min_lr=*/1e-4);

    runner::TrainerOptions options;
    options.max_epochs = epochs;
    options.device = device;
    options.precision = mt::amp::Precision::parse(precision);  // the scaler is on for float16
    options.clip_grad_norm = 1.0;
    options.log_every = 50;
    options.eval_every = 200;
    options.checkpoint_every = run_dir.empty() ? 0 : 200;
    options.run_dir = run_dir;
    options.seed = 0;
    options.log_to_stdout = !run_dir.empty();

    runner::Trainer trainer(model, mt::nn::MSELoss(), opt, train, options);
    trainer.set_scheduler(schedule);
    trainer.set_val_loader(val);
    if (!resume.empty()) trainer.resume_from(resume);

    std::cout << "ToyModel on " << device << ", precision " << options.precision.name() << ", "
              << total_steps << " steps (" << epochs << " epochs of " << train->batches_per_epoch()
              << " batches)\n";
    const runner::TrainSummary summary = trainer.fit();
    std::cout << "final loss " << summary.final_loss << ", best " << summary.best_loss;
    if (summary.final_eval) std::cout << ", validation loss " << summary.final_eval->loss;
    std::cout << "\nsteps " << summary.steps << " (skipped " << summary.steps_skipped << "), "
              << summary.wall_time_s << " s\n";
    if (!run_dir.empty()) std::cout << "run directory: " << run_dir << "\n";
  } catch (const mt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
