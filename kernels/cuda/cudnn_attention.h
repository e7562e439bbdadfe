// scaled_dot_product_attention on cuDNN's fused flash attention (kernels/cuda/cudnn_attention.cpp),
// the first path the CUDA attention kernels try (kernels/cuda/attention_kernels.cu): the in-house
// fused forward and the composed ops stay behind it.
#pragma once

#include "engine/kernel_tables.h"

namespace mantissa::cuda {

// Each returns false, computing nothing and counting why (fast-path "cuda.cudnn_attention"), when
// cuDNN is not asked or declines; true once the call's results are enqueued.
bool cudnn_attention_forward(const AttentionForwardArgs& args);
bool cudnn_attention_backward(const AttentionBackwardArgs& args);

}  // namespace mantissa::cuda
