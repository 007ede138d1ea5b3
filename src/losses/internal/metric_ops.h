// Graph helpers the losses and metrics share (defined in src/losses/metric_ops.cpp; used by
// src/losses/losses.cpp, src/metrics/metrics.cpp and auc.cpp). In losses, the lower of the two
// modules, as in Keras, where metrics build on losses.
#pragma once
#include "lockstep/graph/graph.h"

namespace lockstep::metric_ops {

// Targets of rank r-1 reshaped to the prediction's shape ([N] -> [N, 1]); float targets.
Value dense_targets(Graph& g, Value y_true, Value y_pred);
// sample_weight [N] reshaped to [N, 1, ...] so it broadcasts against x (rank >= 1).
Value weights_like(Graph& g, Value sample_weight, Value x);
// Labels as int32 [N] (accepts [N, 1] and float labels).
Value sparse_labels(Graph& g, Value labels);
// 1 where x > threshold, else 0.
Value greater_than(Graph& g, Value x, double threshold);
// The attrs of an accumulator's assign_add: the replicas' increments are summed (op
// assign_add's `aggregation`: a replicated xla program all-reduces them, so every replica
// holds the whole batch's totals).
inline Attrs summed() { return Attrs{{"aggregation", std::string("sum")}}; }

}  // namespace lockstep::metric_ops
