// Losses (Keras names and defaults). A loss returns per-sample values [N]; the trainer takes
// the mean over the batch (Keras "sum_over_batch_size").
#pragma once
#include <memory>
#include <string>

#include "lockstep/nn/layer.h"

namespace lockstep {

/// A loss function (keras.losses.Loss): per_sample adds to the graph the ops computing one
/// value per sample; the model takes their mean over the batch (with sample weights:
/// sum(loss * w) / batch_size). Subclass it for your own (docs/extending.md).
class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;  ///< Keras class name
  /// Keras's loss config ({"name": ..., "reduction": ..., options}), written by model.save.
  virtual json get_config() const = 0;
  /// y_true, y_pred as graph values; returns per-sample loss [N].
  virtual Value per_sample(Graph& g, Value y_true, Value y_pred) const = 0;
  /// dtype the labels are fed in (int32 for sparse losses, float32 otherwise).
  virtual DType label_dtype() const { return DType::f32; }
};
/// A shared loss (what the factories return and CompileConfig takes).
using LossPtr = std::shared_ptr<Loss>;

namespace losses {
/// The cross-entropies' options (Keras's names and defaults).
struct CrossentropyOptions {
  bool from_logits = false;      ///< y_pred are logits (a softmax/sigmoid is applied inside)
  double label_smoothing = 0.0;  ///< in [0, 1]: mixes the labels with the uniform distribution
};
/// Labels int32 [N] (class indices), predictions [N, C]
/// (keras.losses.SparseCategoricalCrossentropy).
LossPtr SparseCategoricalCrossentropy(CrossentropyOptions o = {});
/// One-hot labels [N, C], predictions [N, C] (keras.losses.CategoricalCrossentropy).
LossPtr CategoricalCrossentropy(CrossentropyOptions o = {});
/// Labels and predictions [N] or [N, K] of independent 0/1 targets; per sample the mean over K.
LossPtr BinaryCrossentropy(CrossentropyOptions o = {});
/// Per sample: mean((y_pred - y_true)^2, axis=-1) (keras.losses.MeanSquaredError, "mse").
LossPtr MeanSquaredError();
/// Per sample: mean(|y_pred - y_true|, axis=-1).
LossPtr MeanAbsoluteError();
/// Per sample: mean over the last axis of 0.5 e^2 where |e| <= delta, else delta (|e| - delta / 2)
/// (e = y_pred - y_true; Keras Huber, default delta 1).
LossPtr Huber(double delta = 1.0);
/// Per sample: sum(t * log(t / p), axis=-1) with t = y_true and p = y_pred clipped to [1e-7, 1]
/// (Keras KLDivergence).
LossPtr KLDivergence();
/// The focal losses (Keras defaults). apply_class_balancing: binary only.
struct FocalOptions {
  bool apply_class_balancing = false;  ///< weigh by alpha (binary only)
  double alpha = 0.25;                 ///< the balancing weight
  double gamma = 2.0;                  ///< the focusing exponent
  bool from_logits = false;            ///< y_pred are logits
  double label_smoothing = 0.0;        ///< as in CrossentropyOptions
};
/// Per sample: mean over the last axis of (1 - p_t)^gamma * binary cross-entropy, p_t the
/// probability given to the true label (times y alpha + (1 - y)(1 - alpha) when balancing).
LossPtr BinaryFocalCrossentropy(FocalOptions o = {});
/// Per sample: sum over classes of -alpha (1 - q)^gamma y log q, q the normalised, clipped
/// probabilities (one-hot labels).
LossPtr CategoricalFocalCrossentropy(FocalOptions o = {});
LossPtr get(const std::string& name);  ///< "sparse_categorical_crossentropy", "mse", ...
}  // namespace losses

}  // namespace lockstep
