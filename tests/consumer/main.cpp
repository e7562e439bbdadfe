#include <mantissa.h>
#include <runner/data/data.h>

#include <iostream>

int main() {
  namespace mt = mantissa;
  mt::Tensor a = mt::ones({2, 2}) * 3.0;
  mt::Tensor b = a + a;
  const float v = b.to_vector<float>()[3];
  std::cout << b << "\n";
  // The runner library links and runs too.
  mt::runner::DataLoader loader(mt::runner::make_teacher_dataset({.samples = 64}),
                                {.batch_size = 16, .shuffle = true, .seed = 1});
  int batches = 0;
  while (loader.next()) ++batches;
  std::cout << batches << " batches\n";
  return v == 6.0f && batches == 4 ? 0 : 1;
}
