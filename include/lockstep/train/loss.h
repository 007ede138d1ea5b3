// Losses (Keras names and defaults). A loss returns per-sample values [N]; the trainer takes
// the mean over the batch (Keras "sum_over_batch_size").
#pragma once
#include <memory>
#include <string>

#include "lockstep/nn/layer.h"

namespace lockstep {

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;  // Keras class name
  virtual json get_config() const = 0;
  // y_true, y_pred as graph values; returns per-sample loss [N].
  virtual Value per_sample(Graph& g, Value y_true, Value y_pred) const = 0;
  // dtype the labels are fed in (int32 for sparse losses, float32 otherwise).
  virtual DType label_dtype() const { return DType::f32; }
};
using LossPtr = std::shared_ptr<Loss>;

namespace losses {
struct CrossentropyOptions {
  bool from_logits = false;
  double label_smoothing = 0.0;
};
LossPtr SparseCategoricalCrossentropy(CrossentropyOptions o = {});
LossPtr CategoricalCrossentropy(CrossentropyOptions o = {});
LossPtr BinaryCrossentropy(CrossentropyOptions o = {});
LossPtr MeanSquaredError();
LossPtr get(const std::string& name);  // "sparse_categorical_crossentropy", "mse", ...
}  // namespace losses

}  // namespace lockstep
