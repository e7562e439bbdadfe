// Mixed-precision training of the ToyModel with autocast and a GradScaler — PyTorch's AMP loop
// in C++. float16 by default (tensor cores on CUDA; on the CPU mantissa emulates their numerics:
// operands rounded to float16, float32 accumulation, one rounding of the result).
//   amp_toy [--precision float16|bfloat16|tf32|float32] [--steps N]
#include <mantissa.h>

#include <cstring>
#include <iostream>
#include <string>

namespace mt = mantissa;

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
  std::string precision_name = "float16";
  int steps = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--precision") && i + 1 < argc) {
      precision_name = argv[++i];
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::stoi(argv[++i]);
    } else {
      std::cout << "usage: amp_toy [--precision float16|bfloat16|tf32|float32] [--steps N]\n";
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  try {
    const mt::amp::Precision precision = mt::amp::Precision::parse(precision_name);
    const bool use_amp = precision.kind() != mt::amp::Precision::Float32;
    mt::manual_seed(0);
    auto device = mt::try_gpu();
    auto net = std::make_shared<ToyModel>();
    net->to(device);
    // A fixed target function the model can learn.
    const mt::Tensor teacher = mt::randn({10, 5}, device);
    mt::nn::MSELoss loss_fn;
    mt::optim::SGD opt(net->parameters(), /*lr=*/0.05);
    // Loss scaling matters for float16; bfloat16 has float32's range and needs none.
    mt::amp::GradScaler scaler(/*enabled=*/precision.kind() == mt::amp::Precision::Float16);
    std::cout << "ToyModel on " << device << ", precision " << precision.name() << "\n";
    for (int step = 0; step < steps; ++step) {
      const mt::Tensor input = mt::randn({20, 10}, device);
      const mt::Tensor target = input.matmul(teacher);
      mt::Tensor loss;
      {
        mt::amp::autocast guard(device.type(), precision, /*enabled=*/use_amp);
        auto output = net->forward(input);
        loss = loss_fn(output, target);
      }
      scaler.scale(loss).backward();
      const bool stepped = scaler.step(opt);
      scaler.update();
      opt.zero_grad();
      if (step % 20 == 0 || step == steps - 1) {
        std::cout << "step " << step << "  loss " << loss.item<float>() << "  loss_scale "
                  << scaler.get_scale() << (stepped ? "" : "  (step skipped: inf/nan gradients)")
                  << "\n";
      }
    }
    std::cout << "steps taken " << scaler.steps_taken() << ", skipped " << scaler.steps_skipped()
              << "\n";
  } catch (const mt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
