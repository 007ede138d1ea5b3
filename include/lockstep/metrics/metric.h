// Metrics as graph state: each metric owns accumulator Variables (e.g. total, count) that
// the compiled step updates with assign_add; result() reads them on the host. Reducing
// across replicas is sum(total) / sum(count).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep {

/// A metric (keras.metrics.Metric): its state lives in variables that the compiled step
/// updates (update() adds those ops); result() reads them on the host. Subclass it for your
/// own: accumulate_mean() covers every mean of a per-sample value.
class Metric {
 public:
  /// A metric logged as `name`.
  explicit Metric(std::string name);
  virtual ~Metric() = default;
  const std::string& name() const { return name_; }  ///< the log key ("accuracy", "auc")
  /// Adds the update ops for one batch (side effects on this metric's variables).
  virtual void update(Graph& g, Value y_true, Value y_pred) = 0;
  /// The same with per-sample weights sample_weight [N] (compile's weighted_metrics, fed by
  /// fit/evaluate's sample_weight, class_weight or a Dataset's third element). Keras semantics:
  /// a mean metric becomes sum(value * w) / sum(w); confusion counts are weighted sums. The
  /// default refuses (a metric that has no weighted form names itself).
  virtual void update_weighted(Graph& g, Value y_true, Value y_pred, Value sample_weight);
  virtual float result() const;  ///< total / count
  virtual void reset();          ///< zeroes the state (fit does at each epoch's start)
  /// The state variables (summed across replicas and workers).
  const std::vector<VariablePtr>& variables() const { return vars_; }

 protected:
  /// Adds assign_add(total, sum(values)) and assign_add(count, N) for per-sample values.
  void accumulate_mean(Graph& g, Value per_sample);
  /// assign_add(total, sum(values * w)) and assign_add(count, sum(w)) (values of rank > 1 are
  /// first averaged over their trailing axes, as Keras's reduce_to_samplewise_values does).
  void accumulate_weighted_mean(Graph& g, Value per_sample, Value sample_weight);
  ///@{
  /// The running sum and count of a mean metric (created by accumulate_mean).
  VariablePtr total_, count_;
  ///@}
  std::vector<VariablePtr> vars_;  ///< every state variable; add your own here

 private:
  std::string name_;
};
/// A shared metric (what the factories return and CompileConfig::metric_objects takes).
using MetricPtr = std::shared_ptr<Metric>;

namespace metrics {
/// "accuracy"/"acc" resolves by loss like Keras: sparse labels -> sparse_categorical_accuracy,
/// one-hot -> categorical_accuracy, binary -> binary_accuracy.
MetricPtr SparseCategoricalAccuracy(const std::string& name = "sparse_categorical_accuracy");
/// Share of rows whose argmax matches the one-hot label's (labels [N, C]).
MetricPtr CategoricalAccuracy(const std::string& name = "categorical_accuracy");
/// Share of entries with (y_pred > threshold) == y_true (labels 0/1).
MetricPtr BinaryAccuracy(const std::string& name = "binary_accuracy", double threshold = 0.5);
/// Share of rows whose int32 label is among the k highest predictions.
MetricPtr SparseTopKCategoricalAccuracy(
    int k = 5, const std::string& name = "sparse_top_k_categorical_accuracy");
/// Top-k accuracy for one-hot labels [N, C] (Keras TopKCategoricalAccuracy): a hit when fewer
/// than k classes score strictly higher than the labelled one.
MetricPtr TopKCategoricalAccuracy(int k = 5,
                                  const std::string& name = "top_k_categorical_accuracy");
/// keras.metrics.Precision / Recall options. thresholds: y_pred > t is a positive prediction
/// (default {0.5}; with top_k, default: every top-k prediction is positive); class_id: only that
/// column of [N, C] labels and predictions (-1: every entry is one binary decision); top_k (0 =
/// off): only each row's top k predictions can be positive (ties at the k-th score all count).
struct ConfusionOptions {
  std::vector<double> thresholds;  ///< y_pred > t is positive (default {0.5})
  int64_t class_id = -1;           ///< only this column (-1: all entries)
  int64_t top_k = 0;               ///< only each row's top k can be positive (0: off)
};
/// TP / (TP + FP) per threshold; result() is the first threshold's (0 when nothing was
/// predicted positive). State: TP and TP + FP, summed across replicas and workers.
MetricPtr Precision(ConfusionOptions o = {}, const std::string& name = "precision");
/// TP / (TP + FN) per threshold (0 when there were no positive labels).
MetricPtr Recall(ConfusionOptions o = {}, const std::string& name = "recall");
/// Every threshold's value of a Precision or Recall (Keras returns a list when given several
/// thresholds); another metric's result() alone.
std::vector<float> threshold_values(const Metric& metric);
/// keras.metrics.FBetaScore / F1Score on [N, C] labels and predictions: per class
/// (1 + beta^2) P R / (beta^2 P + R), P and R from counts summed over batches, replicas and
/// workers. A prediction is positive when > threshold, or, with threshold < 0 (Keras None),
/// when it is its row's maximum. average: "" (None: result() is the mean of the class scores,
/// class_scores() has each), "micro" (counts pooled over classes), "macro" (mean), "weighted"
/// (by each class's label count).
MetricPtr FBetaScore(const std::string& average = "", double beta = 1.0, double threshold = -1,
                     const std::string& name = "fbeta_score");
/// FBetaScore with beta = 1 (keras.metrics.F1Score).
MetricPtr F1Score(const std::string& average = "", double threshold = -1,
                  const std::string& name = "f1_score");
/// The per-class scores of an FBetaScore / F1Score (one entry for "micro").
std::vector<double> class_scores(const Metric& metric);
/// keras.metrics.AUC options (Keras's names and defaults).
struct AUCOptions {
  /// Thresholds (i + 1) / (num_thresholds - 1), i < num_thresholds - 2, plus -1e-7 and 1 + 1e-7.
  int num_thresholds = 200;
  std::string curve = "ROC";                       ///< "ROC" or "PR"
  std::string summation_method = "interpolation";  ///< or "minoring", "majoring"
  /// Given: these thresholds (sorted) plus the two end points; num_thresholds is ignored.
  std::vector<double> thresholds;
  /// false: every entry of [N, C] labels is one binary decision. true: one curve per column,
  /// the result is their mean (weighted by label_weights when given).
  bool multi_label = false;
  /// One weight per label column: weighs the column's counts (multi_label false) or its AUC in
  /// the mean (multi_label true).
  std::vector<double> label_weights;
  bool from_logits = false;  ///< apply a sigmoid to the predictions first
};
/// The area under the ROC or precision-recall curve from TP/FP/TN/FN counts at each threshold
/// (y_pred > threshold is positive), summed over batches, replicas and workers. result() forms
/// the area as Keras does: the trapezoid (or minoring/majoring) Riemann sum, and for PR with
/// "interpolation" Davis & Goadrich's interpolation. Sample weights weigh the counts.
MetricPtr AUC(AUCOptions o = {}, const std::string& name = "auc");
/// tf.math.confusion_matrix on the host: [C, C] f32 counts, row = true class, column = predicted
/// class. labels and predictions: int32 class indices [N], or f32 [N, C] scores / one-hot rows
/// (the argmax is taken, the first on ties). num_classes 0: one more than the largest class seen.
Tensor confusion_matrix(const Tensor& labels, const Tensor& predictions, int64_t num_classes = 0);
/// Mean over samples of mean(|y_pred - y_true|, axis=-1).
MetricPtr MeanAbsoluteError(const std::string& name = "mean_absolute_error");
/// Mean of a per-sample value; update() takes y_pred as the value (y_true ignored).
MetricPtr Mean(const std::string& name = "mean");
/// Mean over samples of mean((y_pred - y_true)^2, axis=-1).
MetricPtr MeanSquaredError(const std::string& name = "mean_squared_error");
/// Resolves a Keras metric string given the loss's label dtype and the prediction width.
MetricPtr get(const std::string& name, const std::string& loss_name);
}  // namespace metrics

}  // namespace lockstep
