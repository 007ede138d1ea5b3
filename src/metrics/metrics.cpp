// Keras metrics as accumulator Variables updated by graph ops (total / count).
#include <algorithm>
#include <functional>

#include "lockstep/metrics/metric.h"
#include "losses/internal/metric_ops.h"
#include "nn/internal/names.h"

namespace lockstep {

namespace {

using namespace metric_ops;

VariablePtr scalar_var(const std::string& name) {
  return std::make_shared<Variable>(Variable{name, Tensor::zeros(Shape{}), false});
}

// A mean of per-sample values computed by `fn(g, y_true, y_pred)`.
class MeanWrapper : public Metric {
 public:
  using Fn = std::function<Value(Graph&, Value, Value)>;
  MeanWrapper(const std::string& name, Fn fn) : Metric(name), fn_(std::move(fn)) {}
  void update(Graph& g, Value y_true, Value y_pred) override {
    accumulate_mean(g, fn_(g, y_true, y_pred));
  }
  void update_weighted(Graph& g, Value y_true, Value y_pred, Value sample_weight) override {
    accumulate_weighted_mean(g, fn_(g, y_true, y_pred), sample_weight);
  }

 private:
  Fn fn_;
};

Attrs all_axes() { return Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}}; }

// 1 where x < bound (x holds counts: x < bound is not x > bound - 0.5).
Value count_below(Graph& g, Value counts, int64_t bound) {
  Value zeros = g.add(op::scale_shift, {counts}, Attrs{{"scale", 0.0}, {"shift", 0.0}});
  return g.add(op::binary_accuracy, {counts, zeros}, Attrs{{"threshold", double(bound) - 0.5}});
}

// scores [N, C] -> 1 where a score is among its row's top k: fewer than k scores of the row
// are strictly higher (ties at the boundary all count, like in_top_k).
Value top_k_mask(Graph& g, Value scores, int64_t k) {
  const Shape& s = g.type(scores).shape;
  LS_CHECK(s.rank() == 2, "top_k needs predictions [N, C], got ", s.str());
  Value row = g.add(op::reshape, {scores}, Attrs{{"shape", std::vector<int64_t>{-1, 1, s[1]}}});
  Value col = g.add(op::reshape, {scores}, Attrs{{"shape", std::vector<int64_t>{-1, s[1], 1}}});
  Value higher = greater_than(g, g.add(op::sub, {row, col}), 0.0);  // [i, j, l]: p[i,l] > p[i,j]
  Value counts = g.add(op::reduce_sum, {higher},
                       Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", false}});
  return count_below(g, counts, k);
}

// One-hot (or multi-hot) labels [N, C] -> the score of the labelled class ... and the top-k
// hit: fewer than k classes score strictly higher than it.
Value one_hot_in_top_k(Graph& g, Value one_hot, Value scores, int64_t k) {
  Value label_score = g.add(op::reduce_sum, {g.add(op::mul, {one_hot, scores})},
                            Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}});
  Value higher = greater_than(g, g.add(op::sub, {scores, label_score}), 0.0);
  Value counts = g.add(op::reduce_sum, {higher},
                       Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", false}});
  return count_below(g, counts, k);
}

// Precision (TP / (TP + FP)) or recall (TP / (TP + FN)) per threshold, as Keras computes them:
// every entry of y_true / y_pred is one binary decision, y_pred > threshold is a positive;
// class_id keeps one column; top_k keeps only each row's top k predictions as candidates.
// total_ holds TP and count_ the denominator, one entry per threshold, so replicas and
// workers reduce by summing them like every other metric.
class ConfusionRatio : public Metric {
 public:
  ConfusionRatio(const std::string& name, bool recall, metrics::ConfusionOptions o)
      : Metric(name), recall_(recall), o_(std::move(o)) {
    if (o_.thresholds.empty()) o_.thresholds = {o_.top_k > 0 ? -1e10 : 0.5};  // Keras defaults
    for (double t : o_.thresholds)
      LS_CHECK(o_.top_k > 0 || (t >= 0 && t <= 1), name, ": thresholds must be in [0, 1], got ", t);
    LS_CHECK(o_.top_k >= 0, name, ": top_k must be >= 1 (0 = off), got ", o_.top_k);
    const Shape per_threshold{int64_t(o_.thresholds.size())};
    total_->value = Tensor::zeros(per_threshold);
    count_->value = Tensor::zeros(per_threshold);
  }

  void update(Graph& g, Value y_true, Value y_pred) override {
    update_weighted(g, y_true, y_pred, Value());
  }

  // Keras weights every confusion count by its sample's weight.
  void update_weighted(Graph& g, Value y_true, Value y_pred, Value sample_weight) override {
    Value labels = dense_targets(g, y_true, y_pred);
    Value scores = y_pred;
    Value candidates;  // top_k: 1 for each row's top k
    if (o_.top_k > 0) candidates = top_k_mask(g, scores, o_.top_k);
    if (o_.class_id >= 0) {
      const Shape& s = g.type(scores).shape;
      LS_CHECK(o_.class_id < s[-1], name(), ": class_id ", o_.class_id, " but predictions have ",
               s[-1], " classes");
      Attrs column{{"begin", std::vector<int64_t>{0, o_.class_id}},
                   {"size", std::vector<int64_t>{-1, 1}}};
      labels = g.add(op::slice, {labels}, column);
      scores = g.add(op::slice, {scores}, column);
      if (candidates.valid()) candidates = g.add(op::slice, {candidates}, column);
    }
    std::vector<Value> true_positives, denominators;
    for (double threshold : o_.thresholds) {
      Value positive = greater_than(g, scores, threshold);
      if (candidates.valid()) positive = g.add(op::mul, {positive, candidates});
      if (sample_weight.valid())
        positive = g.add(op::mul, {positive, weights_like(g, sample_weight, positive)});
      true_positives.push_back(one_entry(g, g.add(op::mul, {labels, positive})));
      Value weighted_labels = sample_weight.valid()
                                  ? g.add(op::mul, {labels, weights_like(g, sample_weight, labels)})
                                  : labels;
      denominators.push_back(one_entry(g, recall_ ? weighted_labels : positive));
    }
    g.add_multi(op::assign_add, {g.variable(total_), joined(g, true_positives)},
                metric_ops::summed());
    g.add_multi(op::assign_add, {g.variable(count_), joined(g, denominators)},
                metric_ops::summed());
  }

  float result() const override { return values()[0]; }

  std::vector<float> values() const {
    std::vector<float> tp = total_->value.to_vector(), denominator = count_->value.to_vector();
    std::vector<float> out(tp.size());
    for (size_t i = 0; i < tp.size(); ++i)
      out[i] = denominator[i] > 0 ? tp[i] / denominator[i] : 0.f;
    return out;
  }

 private:
  static Value one_entry(Graph& g, Value x) {  // sum of x as a [1] tensor
    return g.add(op::reshape, {g.add(op::reduce_sum, {x}, all_axes())},
                 Attrs{{"shape", std::vector<int64_t>{1}}});
  }
  static Value joined(Graph& g, const std::vector<Value>& parts) {
    return parts.size() == 1 ? parts[0] : g.add(op::concat, parts, Attrs{{"axis", int64_t(0)}});
  }

  bool recall_;
  metrics::ConfusionOptions o_;
};

// keras.metrics.FBetaScore: per class (or pooled, "micro") counts of TP (total_), FP (count_),
// FN and label mass, summed across batches, replicas and workers; the score is formed on the
// host in result() exactly as Keras forms it (epsilon 1e-7 in each ratio).
class FBeta : public Metric {
 public:
  FBeta(const std::string& name, std::string average, double beta, double threshold)
      : Metric(name), average_(std::move(average)), beta_(beta), threshold_(threshold) {
    LS_CHECK(
        average_.empty() || average_ == "micro" || average_ == "macro" || average_ == "weighted",
        name, ": average must be \"\" (None), micro, macro or weighted, got '", average_, "'");
    LS_CHECK(beta > 0, name, ": beta must be > 0, got ", beta);
    false_negatives_ = scalar_var(name + "/false_negatives");
    label_mass_ = scalar_var(name + "/intermediate_weights");
    vars_ = {total_, count_, false_negatives_, label_mass_};
  }

  void update(Graph& g, Value y_true, Value y_pred) override {
    update_weighted(g, y_true, y_pred, Value());
  }

  // Keras FBetaScore: each count (and the label mass) is a sum of sample-weighted entries.
  void update_weighted(Graph& g, Value y_true, Value y_pred, Value sample_weight) override {
    const Shape& s = g.type(y_pred).shape;
    LS_CHECK(s.rank() == 2, name(), ": needs predictions [N, C], got ", s.str());
    build(average_ == "micro" ? 1 : s[1]);
    Value labels = dense_targets(g, y_true, y_pred);
    Value predicted;
    if (threshold_ < 0) {  // Keras threshold=None: the row's maximum (when not ~0) is the class
      Value row_max = g.add(op::reduce_max, {y_pred},
                            Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", true}});
      Value below_max = greater_than(g, g.add(op::sub, {row_max, y_pred}), 0.0);
      Value at_max = g.add(op::scale_shift, {below_max}, Attrs{{"scale", -1.0}, {"shift", 1.0}});
      predicted = g.add(op::mul, {at_max, greater_than(g, g.add(op::abs, {y_pred}), 1e-9)});
    } else {
      predicted = greater_than(g, y_pred, threshold_);
    }
    auto one_minus = [&](Value x) {
      return g.add(op::scale_shift, {x}, Attrs{{"scale", -1.0}, {"shift", 1.0}});
    };
    auto weighted = [&](Value x) {
      return sample_weight.valid() ? g.add(op::mul, {x, weights_like(g, sample_weight, x)}) : x;
    };
    add_counts(g, total_, weighted(g.add(op::mul, {predicted, labels})));
    add_counts(g, count_, weighted(g.add(op::mul, {predicted, one_minus(labels)})));
    add_counts(g, false_negatives_, weighted(g.add(op::mul, {one_minus(predicted), labels})));
    add_counts(g, label_mass_, weighted(labels));
  }

  float result() const override {
    std::vector<double> f = per_class();
    if (f.empty()) return 0.f;
    if (average_ == "weighted") {
      std::vector<float> mass = label_mass_->value.to_vector();
      double mass_sum = 0, score = 0;
      for (float m : mass) mass_sum += m;
      for (size_t c = 0; c < f.size(); ++c) score += f[c] * mass[c] / (mass_sum + kEpsilon);
      return float(score);
    }
    double mean = 0;  // micro (one entry), macro, and None (the mean; values() has each class)
    for (double v : f) mean += v;
    return float(mean / double(f.size()));
  }

  std::vector<double> per_class() const {
    if (!built_) return {};
    std::vector<float> tp = total_->value.to_vector(), fp = count_->value.to_vector(),
                       fn = false_negatives_->value.to_vector();
    std::vector<double> f(tp.size());
    for (size_t c = 0; c < tp.size(); ++c) {
      double precision = tp[c] / (tp[c] + fp[c] + kEpsilon);
      double recall = tp[c] / (tp[c] + fn[c] + kEpsilon);
      double beta2 = beta_ * beta_;
      f[c] = precision * recall / (beta2 * precision + recall + kEpsilon) * (1 + beta2);
    }
    return f;
  }

 private:
  static constexpr double kEpsilon = 1e-7;  // keras.backend.epsilon()

  void build(int64_t entries) {
    if (built_) {
      LS_CHECK(total_->value.numel() == entries, name(), ": built for ", total_->value.numel(),
               " classes, now given ", entries);
      return;
    }
    for (auto& v : vars_) v->value = Tensor::zeros(Shape{entries});
    built_ = true;
  }

  // Sums x over the batch (per class), or over everything for "micro".
  void add_counts(Graph& g, const VariablePtr& state, Value x) const {
    Value sum = average_ == "micro"
                    ? g.add(op::reshape, {g.add(op::reduce_sum, {x}, all_axes())},
                            Attrs{{"shape", std::vector<int64_t>{1}}})
                    : g.add(op::reduce_sum, {x},
                            Attrs{{"axes", std::vector<int64_t>{0}}, {"keepdims", false}});
    g.add_multi(op::assign_add, {g.variable(state), sum}, metric_ops::summed());
  }

  std::string average_;
  double beta_, threshold_;
  bool built_ = false;
  VariablePtr false_negatives_, label_mass_;
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
  Value sum = g.add(op::reduce_sum, {per_sample},
                    Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
  g.add_multi(op::assign_add, {g.variable(total_), sum}, metric_ops::summed());
  // A known element count is a constant; an unknown (symbolic batch) one is counted.
  Value n = s.is_known() ? g.scalar(float(s.numel()))
                         : g.add(op::reduce_sum, {g.add(op::ones_like, {per_sample})},
                                 Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
  g.add_multi(op::assign_add, {g.variable(count_), n}, metric_ops::summed());
}

void Metric::update_weighted(Graph& g, Value y_true, Value y_pred, Value sample_weight) {
  if (!sample_weight.valid()) return update(g, y_true, y_pred);
  LS_FAIL("metric '", name_,
          "' has no weighted form (sample weights): list it in compile's metrics, not "
          "weighted_metrics");
}

void Metric::accumulate_weighted_mean(Graph& g, Value per_sample, Value sample_weight) {
  if (!sample_weight.valid()) return accumulate_mean(g, per_sample);
  const Shape& s = g.type(per_sample).shape;
  if (s.rank() > 1) {
    std::vector<int64_t> trailing;
    for (int axis = 1; axis < s.rank(); ++axis) trailing.push_back(axis);
    per_sample =
        g.add(op::reduce_mean, {per_sample}, Attrs{{"axes", trailing}, {"keepdims", false}});
  }
  Value sum_of = g.add(op::reduce_sum, {g.add(op::mul, {per_sample, sample_weight})},
                       Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
  g.add_multi(op::assign_add, {g.variable(total_), sum_of}, metric_ops::summed());
  Value weight_sum = g.add(op::reduce_sum, {sample_weight},
                           Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
  g.add_multi(op::assign_add, {g.variable(count_), weight_sum}, metric_ops::summed());
}

namespace metrics {

MetricPtr SparseCategoricalAccuracy(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    return g.add(op::sparse_categorical_accuracy, {y_pred, sparse_labels(g, y_true)});
  });
}

MetricPtr CategoricalAccuracy(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    return g.add(op::categorical_accuracy, {y_pred, dense_targets(g, y_true, y_pred)});
  });
}

MetricPtr BinaryAccuracy(const std::string& name, double threshold) {
  return std::make_shared<MeanWrapper>(name, [threshold](Graph& g, Value y_true, Value y_pred) {
    return g.add(op::binary_accuracy, {y_pred, dense_targets(g, y_true, y_pred)},
                 Attrs{{"threshold", threshold}});
  });
}

MetricPtr SparseTopKCategoricalAccuracy(int k, const std::string& name) {
  LS_CHECK(k >= 1, "SparseTopKCategoricalAccuracy: k must be >= 1, got ", k);
  return std::make_shared<MeanWrapper>(name, [k](Graph& g, Value y_true, Value y_pred) {
    const Shape& t = g.type(y_true).shape;
    LS_CHECK(t.rank() == 1 || (t.rank() == 2 && t[1] == 1),
             "top-k accuracy needs integer class labels [N], got labels of shape ", t.str());
    return g.add(op::in_top_k, {y_pred, sparse_labels(g, y_true)}, Attrs{{"k", int64_t(k)}});
  });
}

MetricPtr TopKCategoricalAccuracy(int k, const std::string& name) {
  LS_CHECK(k >= 1, "TopKCategoricalAccuracy: k must be >= 1, got ", k);
  return std::make_shared<MeanWrapper>(name, [k](Graph& g, Value y_true, Value y_pred) {
    const Shape& t = g.type(y_true).shape;
    LS_CHECK(t == g.type(y_pred).shape,
             "top_k_categorical_accuracy needs one-hot labels of the "
             "predictions' shape ",
             g.type(y_pred).shape.str(), ", got ", t.str(),
             " (integer labels: sparse_top_k_categorical_accuracy)");
    return one_hot_in_top_k(g, dense_targets(g, y_true, y_pred), y_pred, k);
  });
}

MetricPtr Precision(ConfusionOptions o, const std::string& name) {
  return std::make_shared<ConfusionRatio>(name, false, std::move(o));
}

MetricPtr Recall(ConfusionOptions o, const std::string& name) {
  return std::make_shared<ConfusionRatio>(name, true, std::move(o));
}

std::vector<float> threshold_values(const Metric& metric) {
  auto* ratio = dynamic_cast<const ConfusionRatio*>(&metric);
  return ratio ? ratio->values() : std::vector<float>{metric.result()};
}

namespace {

std::vector<int64_t> class_indices(const Tensor& t, const char* what) {
  const Shape& s = t.shape();
  std::vector<int64_t> out;
  if (t.dtype() == DType::i32) {
    LS_CHECK(s.rank() == 1, "confusion_matrix: int32 ", what, " must be [N], got ", s.str());
    for (int64_t i = 0; i < s[0]; ++i) out.push_back(t.data<int32_t>()[i]);
    return out;
  }
  LS_CHECK(t.dtype() == DType::f32 && s.rank() == 2, "confusion_matrix: ", what,
           " must be int32 [N] or float32 [N, C], got ", s.str());
  const float* v = t.data<float>();
  for (int64_t i = 0; i < s[0]; ++i)
    out.push_back(std::max_element(v + i * s[1], v + (i + 1) * s[1]) - (v + i * s[1]));
  return out;
}

}  // namespace

Tensor confusion_matrix(const Tensor& labels, const Tensor& predictions, int64_t num_classes) {
  std::vector<int64_t> truth = class_indices(labels, "labels");
  std::vector<int64_t> guess = class_indices(predictions, "predictions");
  LS_CHECK(truth.size() == guess.size(), "confusion_matrix: ", truth.size(), " labels but ",
           guess.size(), " predictions");
  int64_t classes = num_classes;
  if (classes == 0)
    for (size_t i = 0; i < truth.size(); ++i)
      classes = std::max({classes, truth[i] + 1, guess[i] + 1});
  Tensor counts = Tensor::zeros(Shape{classes, classes});
  for (size_t i = 0; i < truth.size(); ++i) {
    LS_CHECK(truth[i] >= 0 && truth[i] < classes && guess[i] >= 0 && guess[i] < classes,
             "confusion_matrix: class ", std::max(truth[i], guess[i]), " at row ", i,
             " is outside [0, ", classes, ")");
    counts.data<float>()[truth[i] * classes + guess[i]] += 1.f;
  }
  return counts;
}

MetricPtr FBetaScore(const std::string& average, double beta, double threshold,
                     const std::string& name) {
  return std::make_shared<FBeta>(name, average, beta, threshold);
}

MetricPtr F1Score(const std::string& average, double threshold, const std::string& name) {
  return std::make_shared<FBeta>(name, average, 1.0, threshold);
}

std::vector<double> class_scores(const Metric& metric) {
  auto* fbeta = dynamic_cast<const FBeta*>(&metric);
  LS_CHECK(fbeta, "class_scores: '", metric.name(), "' is not an F1Score or FBetaScore");
  return fbeta->per_class();
}

MetricPtr MeanAbsoluteError(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    Value d = g.add(op::abs, {g.add(op::sub, {y_pred, dense_targets(g, y_true, y_pred)})});
    if (g.type(d).shape.rank() >= 2)
      d = g.add(op::reduce_mean, {d},
                Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", false}});
    return d;
  });
}

MetricPtr Mean(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph&, Value, Value v) { return v; });
}

MetricPtr MeanSquaredError(const std::string& name) {
  return std::make_shared<MeanWrapper>(name, [](Graph& g, Value y_true, Value y_pred) {
    Value d = g.add(op::square, {g.add(op::sub, {y_pred, dense_targets(g, y_true, y_pred)})});
    if (g.type(d).shape.rank() >= 2)
      d = g.add(op::reduce_mean, {d},
                Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", false}});
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
  if (c == "topk" || c == "sparsetopkcategoricalaccuracy")
    return SparseTopKCategoricalAccuracy(5, name);
  if (c == "topkcategoricalaccuracy") return TopKCategoricalAccuracy(5, name);
  if (c == "mse" || c == "meansquarederror") return MeanSquaredError(name);
  if (c == "mae" || c == "meanabsoluteerror") return MeanAbsoluteError(name);
  if (c == "precision") return Precision({}, name);
  if (c == "recall") return Recall({}, name);
  if (c == "auc") return AUC({}, name);
  LS_FAIL("unknown metric '", name,
          "' (known: accuracy, acc, sparse_categorical_accuracy, categorical_accuracy, "
          "binary_accuracy, top_k, sparse_top_k_categorical_accuracy, "
          "top_k_categorical_accuracy, mse, mae, precision, recall, auc)");
}

}  // namespace metrics

}  // namespace lockstep
