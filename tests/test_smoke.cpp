#include "test_util.h"

namespace mt = mantissa;

TEST(Smoke, AddBroadcast) {
  mt::Tensor a = mt::from_vector<float>({1, 2, 3, 4, 5, 6}, mt::Shape{2, 3});
  mt::Tensor b = mt::tensor<float>({10, 20, 30});
  mt::Tensor c = a + b;
  EXPECT_EQ(c.shape(), (mt::Shape{2, 3}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(c.str(), "tensor([[11., 22., 33.],\n        [14., 25., 36.]])");
}
