// The cpu backend's layouts (run after the fusions): a float32 4-D activation (channels a
// multiple of 16, so the same bytes) whose producer and every reader take oneDNN's blocked
// nChw16c layout stays in it, where a convolution writes or reads it: no reorder between the
// convolutions of an inference or a training program. Takers: conv2d and its two gradients (x
// and y sides), conv2d_pointwise_depthwise (x and y), max_pool2d (x) and max_pool2d_grad (x, dx),
// batch_norm_train/_infer/_train_grad (all tensors shaped like x), reduce_sum/reduce_mean over axes
// [0, 1, 2] or [1, 2] and their gradients, and same-shape ops declared layout_agnostic (they tie
// their operands to one layout). A graph output, a reshape, a bfloat16 op or any other reader keeps
// a tensor, and all tied to it, NHWC. Sets the nodes' src_layout/dst_layout/layout attrs; appends
// one "layout: nChw16c between ..." line per blocked set of tensors to `report`.
#pragma once
#include <string>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep::cpu {

void plan_layouts(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report);

}  // namespace lockstep::cpu
