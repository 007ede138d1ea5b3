// Metrics as graph state: each metric owns accumulator Variables (e.g. total, count) that
// the compiled step updates with assign_add; result() reads them on the host. Reducing
// across replicas is sum(total) / sum(count).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep {

class Metric {
 public:
  explicit Metric(std::string name);
  virtual ~Metric() = default;
  const std::string& name() const { return name_; }
  // Adds the update ops for one batch (side effects on this metric's variables).
  virtual void update(Graph& g, Value y_true, Value y_pred) = 0;
  virtual float result() const;  // total / count
  virtual void reset();
  const std::vector<VariablePtr>& variables() const { return vars_; }

 protected:
  // Adds assign_add(total, sum(values)) and assign_add(count, N) for per-sample values.
  void accumulate_mean(Graph& g, Value per_sample);
  VariablePtr total_, count_;
  std::vector<VariablePtr> vars_;

 private:
  std::string name_;
};
using MetricPtr = std::shared_ptr<Metric>;

namespace metrics {
// "accuracy"/"acc" resolves by loss like Keras: sparse labels -> sparse_categorical_accuracy,
// one-hot -> categorical_accuracy, binary -> binary_accuracy.
MetricPtr SparseCategoricalAccuracy(const std::string& name = "sparse_categorical_accuracy");
MetricPtr CategoricalAccuracy(const std::string& name = "categorical_accuracy");
MetricPtr BinaryAccuracy(const std::string& name = "binary_accuracy", double threshold = 0.5);
MetricPtr SparseTopKCategoricalAccuracy(int k = 5,
                                        const std::string& name = "sparse_top_k_categorical_accuracy");
// Mean of a per-sample value; update() takes y_pred as the value (y_true ignored).
MetricPtr Mean(const std::string& name = "mean");
// Mean over samples of mean((y_pred - y_true)^2, axis=-1).
MetricPtr MeanSquaredError(const std::string& name = "mean_squared_error");
// Resolves a Keras metric string given the loss's label dtype and the prediction width.
MetricPtr get(const std::string& name, const std::string& loss_name);
}  // namespace metrics

}  // namespace lockstep
