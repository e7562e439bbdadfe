// The ToyModel (Linear(10,10) -> ReLU -> Linear(10,5)) trained with MSE and SGD on random data,
// written the way a PyTorch user writes it. Runs on cuda:0 when present, else on the CPU.
#include <mantissa.h>

#include <iostream>

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

int main() {
  try {
    mt::manual_seed(0);
    auto device = mt::try_gpu();  // cuda:0 if present, else cpu
    auto model = std::make_shared<ToyModel>();
    model->to(device);
    std::cout << "training " << *model << "\non " << device << "\n";

    mt::nn::MSELoss loss_fn;
    mt::optim::SGD optimizer(model->parameters(), /*lr=*/0.001);
    for (int step = 0; step < 100; ++step) {
      optimizer.zero_grad();
      auto outputs = model->forward(mt::randn({20, 10}, device));
      auto labels = mt::randn({20, 5}).to(device);
      auto loss = loss_fn(outputs, labels);
      loss.backward();
      optimizer.step();
      if (step % 10 == 0 || step == 99) {
        std::cout << "step " << step << "  loss " << loss.item<float>() << "\n";
      }
    }
  } catch (const mt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
