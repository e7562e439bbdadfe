// A small convolutional network learning to tell noisy 12x12 images of a horizontal bar, a
// vertical bar and a cross apart. Bars sit at random places with random lengths, so the network
// has to learn translation-invariant edge detectors — what convolution and pooling are for.
// Conv2d -> ReLU -> MaxPool2d -> Conv2d -> ReLU -> AvgPool2d -> Flatten -> Linear, trained with
// Adam and cross-entropy on cuda:0 when present, else on the CPU, in a few seconds.
//
//   cnn
#include <mantissa.h>

#include <cstdio>
#include <iostream>
#include <utility>
#include <vector>

namespace mt = mantissa;
namespace nn = mantissa::nn;

constexpr int64_t kSize = 12;
constexpr int64_t kClasses = 3;  // 0: horizontal bar, 1: vertical bar, 2: cross

// `n` images [n, 1, 12, 12] with labels [n]: bars of value 1 (length 5..10) on Gaussian noise.
std::pair<mt::Tensor, mt::Tensor> make_images(int64_t n, mt::Device device) {
  const std::vector<int64_t> labels = mt::randint(0, kClasses, {n}).to_vector<int64_t>();
  const std::vector<int64_t> pos = mt::randint(0, kSize, {n, 4}).to_vector<int64_t>();
  const std::vector<int64_t> len = mt::randint(5, 11, {n, 2}).to_vector<int64_t>();
  std::vector<float> pixels(static_cast<size_t>(n * kSize * kSize), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float* img = pixels.data() + i * kSize * kSize;
    const int64_t* p = pos.data() + i * 4;
    if (labels[i] != 1) {  // horizontal bar in row p[0], starting at a column that fits
      const int64_t start = p[1] % (kSize - len[i * 2] + 1);
      for (int64_t c = start; c < start + len[i * 2]; ++c) img[p[0] * kSize + c] = 1.0f;
    }
    if (labels[i] != 0) {  // vertical bar in column p[2]
      const int64_t start = p[3] % (kSize - len[i * 2 + 1] + 1);
      for (int64_t r = start; r < start + len[i * 2 + 1]; ++r) img[r * kSize + p[2]] = 1.0f;
    }
  }
  mt::Tensor x = mt::from_vector(pixels, mt::Shape{n, 1, kSize, kSize});
  x = x + 0.3 * mt::randn(x.shape());
  return {x.to(device), mt::from_vector(labels).to(device)};
}

double accuracy(const mt::Tensor& logits, const mt::Tensor& labels) {
  mt::autograd::NoGradGuard no_grad;
  const mt::Tensor correct = (logits.argmax(1) == labels).sum();
  return static_cast<double>(correct.item<int64_t>()) / static_cast<double>(labels.numel());
}

int main() {
  try {
    mt::manual_seed(0);
    const mt::Device device = mt::try_gpu();  // cuda:0 if present, else cpu
    auto [x_train, y_train] = make_images(1024, device);
    auto [x_test, y_test] = make_images(512, device);

    nn::Sequential model(nn::Conv2d(1, 8, 3, nn::Conv2dOptions{.padding = 1}),   // 8 x 12 x 12
                         nn::ReLU(), nn::MaxPool2d(2),                           // 8 x 6 x 6
                         nn::Conv2d(8, 16, 3, nn::Conv2dOptions{.padding = 1}),  // 16 x 6 x 6
                         nn::ReLU(), nn::AvgPool2d(2),                           // 16 x 3 x 3
                         nn::Flatten(), nn::Linear(16 * 3 * 3, kClasses));
    model->to(device);
    std::cout << model->repr() << "\non " << device << "\n";

    nn::CrossEntropyLoss loss_fn;
    mt::optim::Adam optimizer(model->parameters(), {.lr = 0.01});
    const int64_t batch = 64, n = x_train.size(0), steps = n / batch;
    for (int epoch = 1; epoch <= 10; ++epoch) {
      model->train();
      double loss_sum = 0, accuracy_sum = 0;
      for (int64_t start = 0; start < n; start += batch) {
        const mt::Tensor xb = x_train.narrow(0, start, batch);
        const mt::Tensor yb = y_train.narrow(0, start, batch);
        optimizer.zero_grad();
        const mt::Tensor logits = model(xb);
        const mt::Tensor loss = loss_fn(logits, yb);
        loss.backward();
        optimizer.step();
        loss_sum += loss.item<double>();
        accuracy_sum += accuracy(logits, yb);
      }
      model->eval();
      mt::autograd::NoGradGuard no_grad;
      std::printf("epoch %2d  loss %.4f  train accuracy %.1f%%  test accuracy %.1f%%\n", epoch,
                  loss_sum / static_cast<double>(steps),
                  100.0 * accuracy_sum / static_cast<double>(steps),
                  100.0 * accuracy(model(x_test), y_test));
    }
    mt::autograd::NoGradGuard no_grad;
    const double final_accuracy = accuracy(model(x_test), y_test);
    std::printf("final test accuracy %.1f%%\n", 100.0 * final_accuracy);
    return final_accuracy > 0.9 ? 0 : 1;
  } catch (const mt::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
