// The composed convolution (kernels/conv_composite.h: im2col, bmm, col2im), the CUDA path where
// cuDNN offers no algorithm, against the CPU convolution kernels: every direction and floating
// dtype over groups, strides, padding (also wider than the window reaches) and dilation. Shared by
// test_conv (the composition on the CPU) and test_cuda_conv (on the GPU).
#pragma once

#include <string>
#include <vector>

#include "engine/kernel_tables.h"
#include "kernels/conv_composite.h"
#include "test_util.h"

namespace mantissa::testing {

inline void check_composed_convolution(Device device) {
  struct Case {
    int64_t n, c, h, w, o, kh, kw;
    Conv2dParams p;
  };
  const Case cases[] = {
      {2, 3, 9, 8, 4, 3, 3, {{1, 1}, {0, 0}, {1, 1}, 1}},
      {2, 4, 10, 9, 6, 3, 2, {{2, 1}, {1, 2}, {1, 2}, 2}},
      {1, 6, 7, 7, 6, 3, 3, {{1, 1}, {1, 1}, {1, 1}, 6}},  // depthwise
      {3, 5, 6, 5, 3, 1, 1, {{1, 1}, {0, 0}, {1, 1}, 1}},  // 1x1
      {2, 2, 11, 12, 4, 5, 3, {{3, 2}, {2, 1}, {2, 3}, 1}},
      {1, 2, 5, 4, 2, 2, 2, {{3, 3}, {2, 2}, {1, 1}, 1}},  // stride past the window
  };
  const Device cpu = Device::cpu();
  for (DType dt : floating_dtypes()) {
    // Half types: the composition rounds the column products once more than one GEMM does.
    const Tolerance tol = dt == kFloat64   ? Tolerance{1e-12, 1e-12}
                          : dt == kFloat32 ? Tolerance{1e-5, 1e-5}
                          : dt == kFloat16 ? Tolerance{4e-3, 1e-2}
                                           : Tolerance{3e-2, 6e-2};
    for (const Case& k : cases) {
      const int64_t ho =
          conv_columns::output_size(k.h, k.kh, k.p.stride[0], k.p.padding[0], k.p.dilation[0]);
      const int64_t wo =
          conv_columns::output_size(k.w, k.kw, k.p.stride[1], k.p.padding[1], k.p.dilation[1]);
      const std::string what = std::string(dtype_name(dt)) + " N" + std::to_string(k.n) + " C" +
                               std::to_string(k.c) + " O" + std::to_string(k.o) + " k" +
                               std::to_string(k.kh) + "x" + std::to_string(k.kw) + " g" +
                               std::to_string(k.p.groups) + " on " + device.str();
      const Tensor x = random_tensor({k.n, k.c, k.h, k.w}, dt, false, -1.0, 1.0);
      const Tensor w = random_tensor({k.o, k.c / k.p.groups, k.kh, k.kw}, dt, false, -1.0, 1.0);
      const Tensor go = random_tensor({k.n, k.o, ho, wo}, dt, false, -1.0, 1.0);
      const Tensor y = empty({k.n, k.o, ho, wo}, dt), gx = empty(x.shape(), dt),
                   gw = empty(w.shape(), dt);
      conv2d_forward_kernel(cpu)(y, x, w, Tensor(), k.p);
      conv2d_backward_input_kernel(cpu)(gx, go, w, k.p);
      conv2d_backward_weight_kernel(cpu)(gw, go, x, k.p);

      const TensorOptions on = TensorOptions(device).dtype(dt);
      const Tensor xd = x.to(device), wd = w.to(device), god = go.to(device);
      const Tensor yd = empty(y.shape(), on), gxd = empty(x.shape(), on),
                   gwd = empty(w.shape(), on);
      conv_composite::forward(yd, xd, wd, k.p);
      conv_composite::backward_input(gxd, god, wd, k.p);
      conv_composite::backward_weight(gwd, god, xd, k.p);
      expect_close(yd.cpu(), y, tol.rtol, tol.atol, what + " forward");
      expect_close(gxd.cpu(), gx, tol.rtol, tol.atol, what + " backward input");
      // The weight gradient sums over the batch and every output pixel: looser by 4x.
      expect_close(gwd.cpu(), gw, 4 * tol.rtol, 4 * tol.atol, what + " backward weight");
    }
  }
}

}  // namespace mantissa::testing
