// Graph helpers the losses and metrics share (losses/internal/metric_ops.h): labels, targets and
// sample weights shaped for a loss or metric, and binary_accuracy against a threshold.
#include "losses/internal/metric_ops.h"

namespace lockstep {

namespace metric_ops {

// Labels as int32 [N] (accepts [N, 1] and float labels).
Value sparse_labels(Graph& g, Value labels) {
  const TensorType& t = g.type(labels);
  if (t.shape.rank() == 2 && t.shape[1] == 1)
    labels = g.add(op::reshape, {labels}, Attrs{{"shape", std::vector<int64_t>{-1}}});
  if (t.dtype != DType::i32)
    labels = g.add(op::cast, {labels}, Attrs{{"dtype", std::string("int32")}});
  return labels;
}

// Targets of rank r-1 reshaped to the prediction's shape ([N] -> [N, 1]); float targets.
Value dense_targets(Graph& g, Value y_true, Value y_pred) {
  const TensorType& t = g.type(y_true);
  const Shape& p = g.type(y_pred).shape;
  if (t.dtype != DType::f32)
    y_true = g.add(op::cast, {y_true}, Attrs{{"dtype", std::string("float32")}});
  if (t.shape.rank() + 1 == p.rank() && p[-1] == 1) {
    std::vector<int64_t> s = p.vec();
    s[0] = -1;
    y_true = g.add(op::reshape, {y_true}, Attrs{{"shape", s}});
  }
  return y_true;
}

// sample_weight [N] reshaped to [N, 1, ...] so it broadcasts against x (rank >= 1).
Value weights_like(Graph& g, Value sample_weight, Value x) {
  const int rank = g.type(x).shape.rank();
  if (rank <= 1) return sample_weight;
  std::vector<int64_t> shape(size_t(rank), 1);
  shape[0] = -1;
  return g.add(op::reshape, {sample_weight}, Attrs{{"shape", shape}});
}

// 1 where x > threshold, else 0 (binary_accuracy against a target of ones).
Value greater_than(Graph& g, Value x, double threshold) {
  Value ones = g.add(op::scale_shift, {x}, Attrs{{"scale", 0.0}, {"shift", 1.0}});
  return g.add(op::binary_accuracy, {x, ones}, Attrs{{"threshold", threshold}});
}

}  // namespace metric_ops

}  // namespace lockstep
