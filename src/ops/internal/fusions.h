// The op-level fusions every kernel backend runs (src/ops/fusions.cpp): conv2d -> bias_add ->
// relu into one conv2d; batch_norm_train/_infer -> [add ->] relu into one batch norm, and
// relu_grad -> batch_norm_train_grad into one gradient; conv2d -> batch_norm_infer folded into
// the conv (inference); relu_grad(max_pool2d_grad(...)) into one max_pool2d_grad. Appends one
// report line per rewrite. The fused forms are declared by the ops themselves (their
// fused_bias/activation/residual attributes), which is why the rewrites live here, below the
// backends, and not in src/graph (which names no op).
#pragma once
#include <string>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep::ops {

void fuse_for_kernels(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report);

}  // namespace lockstep::ops
