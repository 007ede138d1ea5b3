// cpu backend: the depthwise convolution kernels Lockstep runs itself rather than through oneDNN
// (see depthwise_kernels.cpp for why).
#pragma once
#include <memory>

#include "lockstep/graph/op_registry.h"
#include "ops/internal/nn_geometry.h"

namespace lockstep::cpu {

// conv2d_backward_filter (dy, x) -> dw of a depthwise conv (groups == channels == filters) with
// x, dy and dw all float32 or all bfloat16; x and dy NHWC, or nChw16c where `x_blocked` /
// `dy_blocked` (the layout pass's src_layout / dst_layout). nullptr for anything else (the
// caller runs oneDNN).
std::unique_ptr<Kernel> depthwise_backward_filter(const ops::ConvGeom& g, DType x, DType dy,
                                                  DType dw, bool x_blocked, bool dy_blocked);

}  // namespace lockstep::cpu
