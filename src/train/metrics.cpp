// Keras metrics as accumulator Variables updated by graph ops (total / count).
#include <functional>

#include "lockstep/train/metric.h"
#include "train/names.h"

namespace lockstep {

namespace {

VariablePtr scalar_var(const std::string& name) {
  return std::make_shared<Variable>(Variable{name, Tensor::zeros(Shape{}), false});
}

// Labels as int32 [N] (accepts [N, 1] and float labels).
Value sparse_labels(Graph& g, Value labels) {
  const TensorType& t = g.type(labels);
  if (t.shape.rank() == 2 && t.shape[1] == 1)
    labels = g.add("reshape", {labels}, Attrs{{"shape", std::vector<int64_t>{-1}}});
  if (t.dtype != DType::i32) labels = g.add("cast", {labels}, Attrs{{"dtype", std::string("int32")}});
  return labels;
}

// Targets of rank r-1 reshaped to the prediction's shape ([N] -> [N, 1]); float targets.
Value dense_targets(Graph& g, Value y_true, Value y_pred) {
  const TensorType& t = g.type(y_true);
  const Shape& p = g.type(y_pred).shape;
  if (t.dtype != DType::f32) y_true = g.add("cast", {y_true}, Attrs{{"dtype", std::string("float32")}});
  if (t.shape.rank() + 1 == p.rank() && p[-1] == 1) {
    std::vector<int64_t> s = p.vec();
    s[0] = -1;
    y_true = g.add("reshape", {y_true}, Attrs{{"shape", s}});
  }
  return y_true;
}

// A mean of per-sample values computed by `fn(g, y_true, y_pred)`.
class MeanWrapper : public Metric {
 public:
  using Fn = std::function<Value(Graph&, Value, Value)>;
  MeanWrapper(const std::string& name, Fn fn) : Metric(name), fn_(std::move(fn)) {}
  void update(Graph& g, Value y_true, Value y_pred) override {
    accumulate_mean(g, fn_(g, y_true, y_pred));
  }

 private:
  Fn fn_;
};

}  // namespace

Metric::Metric(std::string name) : name_(std::move(name)) {
  total_ = scalar_var(name_ + "/total");
  count_ = scalar_var(name_ + "/count");
  vars_ = {total_, count_};
}

float Metric::result() const {
  float count = count_->value.item();
  return count > 0 ? total_->value.item() / count : 0.f;
}

void Metric::reset() {
  for (auto& v : vars_) v->value.fill(0.f);
}

void Metric::accumulate_mean(Graph& g, Value per_sample) {
  const Shape& s = g.type(per_sample).shape;
  Value sum = g.add("reduce_sum", {per_sample}, Attrs{{"axes", std::vector<int64_t>{}},
                                                     {"keepdims", false}});
  g.add_multi("assign_add", {g.variable(total_), sum});
  // A known element count is a constant; an unknown (symbolic batch) one is counted.
  Value n = s.is_known()
                ? g.scalar(float(s.numel()))
                : g.add("reduce_sum", {g.add("ones_like", {per_sample})},
                        Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
  g.add_multi("assign_add", {g.variable(count_), n});
}

namespace metrics {

MetricPtr SparseCategoricalAccuracy(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    return g.add("sparse_categorical_accuracy", {y_pred, sparse_labels(g, y_true)});
  });
}

MetricPtr CategoricalAccuracy(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    return g.add("categorical_accuracy", {y_pred, dense_targets(g, y_true, y_pred)});
  });
}

MetricPtr BinaryAccuracy(const std::string& name, double threshold) {
  return std::make_shared<MeanWrapper>(name, [threshold](Graph& g, Value y_true, Value y_pred) {
    return g.add("binary_accuracy", {y_pred, dense_targets(g, y_true, y_pred)},
                 Attrs{{"threshold", threshold}});
  });
}

MetricPtr SparseTopKCategoricalAccuracy(int k, const std::string& name) {
  LS_CHECK(k >= 1, "SparseTopKCategoricalAccuracy: k must be >= 1, got ", k);
  return std::make_shared<MeanWrapper>(name, [k](Graph& g, Value y_true, Value y_pred) {
    const Shape& t = g.type(y_true).shape;
    LS_CHECK(t.rank() == 1 || (t.rank() == 2 && t[1] == 1),
             "top-k accuracy needs integer class labels [N], got labels of shape ", t.str());
    return g.add("in_top_k", {y_pred, sparse_labels(g, y_true)}, Attrs{{"k", int64_t(k)}});
  });
}

MetricPtr Mean(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph&, Value, Value v) { return v; });
}

MetricPtr MeanSquaredError(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    Value d = g.add("square", {g.add("sub", {y_pred, dense_targets(g, y_true, y_pred)})});
    if (g.type(d).shape.rank() >= 2)
      d = g.add("reduce_mean", {d}, Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", false}});
    return d;
  });
}

MetricPtr get(const std::string& name, const std::string& loss_name) {
  const std::string c = canonical_name(name), loss = canonical_name(loss_name);
  if (c == "accuracy" || c == "acc") {
    // Keras resolves "accuracy" by the loss; the metric keeps the name the user wrote.
    if (loss == "sparsecategoricalcrossentropy") return SparseCategoricalAccuracy(name);
    if (loss == "binarycrossentropy" || loss == "bce") return BinaryAccuracy(name);
    return CategoricalAccuracy(name);
  }
  if (c == "sparsecategoricalaccuracy") return SparseCategoricalAccuracy(name);
  if (c == "categoricalaccuracy") return CategoricalAccuracy(name);
  if (c == "binaryaccuracy") return BinaryAccuracy(name);
  if (c == "topk" || c == "sparsetopkcategoricalaccuracy" || c == "topkcategoricalaccuracy")
    return SparseTopKCategoricalAccuracy(5, name);
  if (c == "mse" || c == "meansquarederror") return MeanSquaredError(name);
  LS_FAIL("unknown metric '", name,
          "' (known: accuracy, acc, sparse_categorical_accuracy, categorical_accuracy, "
          "binary_accuracy, top_k, sparse_top_k_categorical_accuracy, mse)");
}

}  // namespace metrics

}  // namespace lockstep
