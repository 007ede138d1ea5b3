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
// Per sample: mean(|y_pred - y_true|, axis=-1).
LossPtr MeanAbsoluteError();
// Per sample: mean over the last axis of 0.5 e^2 where |e| <= delta, else delta (|e| - delta / 2)
// (e = y_pred - y_true; Keras Huber, default delta 1).
LossPtr Huber(double delta = 1.0);
// Per sample: sum(t * log(t / p), axis=-1) with t = y_true and p = y_pred clipped to [1e-7, 1]
// (Keras KLDivergence).
LossPtr KLDivergence();
// The focal losses (Keras defaults). apply_class_balancing: binary only.
struct FocalOptions {
  bool apply_class_balancing = false;
  double alpha = 0.25;
  double gamma = 2.0;
  bool from_logits = false;
  double label_smoothing = 0.0;
};
// Per sample: mean over the last axis of (1 - p_t)^gamma * binary cross-entropy, p_t the
// probability given to the true label (times y alpha + (1 - y)(1 - alpha) when balancing).
LossPtr BinaryFocalCrossentropy(FocalOptions o = {});
// Per sample: sum over classes of -alpha (1 - q)^gamma y log q, q the normalised, clipped
// probabilities (one-hot labels).
LossPtr CategoricalFocalCrossentropy(FocalOptions o = {});
LossPtr get(const std::string& name);  // "sparse_categorical_crossentropy", "mse", ...
}  // namespace losses

}  // namespace lockstep
