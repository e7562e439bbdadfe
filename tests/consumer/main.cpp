#include <mantissa.h>

#include <iostream>

int main() {
  namespace mt = mantissa;
  mt::Tensor a = mt::ones({2, 2}) * 3.0;
  mt::Tensor b = a + a;
  const float v = b.to_vector<float>()[3];
  std::cout << b << "\n";
  return v == 6.0f ? 0 : 1;
}
