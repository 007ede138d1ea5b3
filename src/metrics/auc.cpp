// keras.metrics.AUC: confusion counts at fixed thresholds, accumulated in the compiled step
// (summed across replicas and workers like every metric state), and the area formed on the
// host exactly as Keras's AUC.result() forms it.
#include <algorithm>
#include <cmath>

#include "lockstep/metrics/metric.h"
#include "losses/internal/metric_ops.h"

namespace lockstep {

namespace {

using namespace metric_ops;

constexpr double kEpsilon = 1e-7;  // keras.backend.epsilon()

Value sum_over(Graph& g, Value x, int64_t axis) {
  return g.add(op::reduce_sum, {x},
               Attrs{{"axes", std::vector<int64_t>{axis}}, {"keepdims", false}});
}

Value reshaped(Graph& g, Value x, std::vector<int64_t> shape) {
  return g.add(op::reshape, {x}, Attrs{{"shape", std::move(shape)}});
}

double divide_no_nan(double a, double b) { return b == 0 ? 0.0 : a / b; }

class AUCMetric : public Metric {
 public:
  AUCMetric(const std::string& name, metrics::AUCOptions o) : Metric(name), o_(std::move(o)) {
    LS_CHECK(o_.curve == "ROC" || o_.curve == "PR", name,
             ": curve must be \"ROC\" or \"PR\", got '", o_.curve, "'");
    LS_CHECK(o_.summation_method == "interpolation" || o_.summation_method == "minoring" ||
                 o_.summation_method == "majoring",
             name, ": summation_method must be interpolation, minoring or majoring, got '",
             o_.summation_method, "'");
    std::vector<double> inner = o_.thresholds;
    if (inner.empty()) {
      LS_CHECK(o_.num_thresholds > 1, name, ": num_thresholds must be an integer > 1, got ",
               o_.num_thresholds);
      for (int i = 0; i < o_.num_thresholds - 2; ++i)
        inner.push_back(double(i + 1) / double(o_.num_thresholds - 1));
    }
    std::sort(inner.begin(), inner.end());
    evenly_spaced_ = o_.thresholds.empty() || evenly_spaced(inner);
    thresholds_ = {-kEpsilon};
    thresholds_.insert(thresholds_.end(), inner.begin(), inner.end());
    thresholds_.push_back(1.0 + kEpsilon);
    true_negatives_ = std::make_shared<Variable>(
        Variable{name + "/true_negatives", Tensor::zeros(Shape{}), false});
    false_negatives_ = std::make_shared<Variable>(
        Variable{name + "/false_negatives", Tensor::zeros(Shape{}), false});
    vars_ = {total_, count_, true_negatives_, false_negatives_};  // TP, FP, TN, FN
    if (!o_.multi_label) build(1);
  }

  void update(Graph& g, Value y_true, Value y_pred) override {
    update_weighted(g, y_true, y_pred, Value());
  }

  void update_weighted(Graph& g, Value y_true, Value y_pred, Value sample_weight) override {
    // Keras counts a label as positive when it is nonzero, and (evenly spaced thresholds, its
    // bucketed update) clips the predictions to [0, 1] first.
    Value labels = greater_than(g, g.add(op::abs, {dense_targets(g, y_true, y_pred)}), 0.0);
    Value scores = o_.from_logits ? g.add(op::sigmoid, {y_pred}) : y_pred;
    if (evenly_spaced_)
      scores = g.add(op::maximum, {g.add(op::minimum, {scores, g.scalar(1.f)}), g.scalar(0.f)});
    const Shape& s = g.type(scores).shape;
    LS_CHECK(g.type(labels).shape == s, name(), ": labels ", g.type(labels).shape.str(),
             " do not match predictions ", s.str());
    LS_CHECK(!o_.multi_label || s.rank() == 2, name(),
             ": multi_label needs predictions [N, C], got ", s.str());
    const int64_t columns = s.rank() >= 2 ? s[-1] : 1;
    if (o_.multi_label) build(columns);
    LS_CHECK(o_.label_weights.empty() || int64_t(o_.label_weights.size()) == columns, name(), ": ",
             o_.label_weights.size(), " label_weights for ", columns, " label columns");
    Value positive_mass = labels;  // each entry's weight as a positive / negative label
    Value negative_mass = g.add(op::scale_shift, {labels}, Attrs{{"scale", -1.0}, {"shift", 1.0}});
    if (sample_weight.valid()) {
      Value w = weights_like(g, sample_weight, labels);
      positive_mass = g.add(op::mul, {positive_mass, w});
      negative_mass = g.add(op::mul, {negative_mass, w});
    }
    if (!o_.label_weights.empty() && !o_.multi_label) {
      Value w = g.variable(label_weight_variable());
      positive_mass = g.add(op::mul, {positive_mass, w});
      negative_mass = g.add(op::mul, {negative_mass, w});
    }
    // Broadcast against the thresholds: [T, 1] x [1, M] (or [T, 1, 1] x [1, N, C]).
    const int64_t t = int64_t(thresholds_.size());
    std::vector<int64_t> entries =
        o_.multi_label ? std::vector<int64_t>{1, -1, columns} : std::vector<int64_t>{1, -1};
    std::vector<int64_t> per_threshold =
        o_.multi_label ? std::vector<int64_t>{t, 1, 1} : std::vector<int64_t>{t, 1};
    scores = reshaped(g, scores, entries);
    positive_mass = reshaped(g, positive_mass, entries);
    negative_mass = reshaped(g, negative_mass, entries);
    Value thresholds = reshaped(g, g.variable(threshold_variable()), per_threshold);
    Value predicted = greater_than(g, g.add(op::sub, {scores, thresholds}), 0.0);
    Value not_predicted =
        g.add(op::scale_shift, {predicted}, Attrs{{"scale", -1.0}, {"shift", 1.0}});
    auto count = [&](const VariablePtr& state, Value decision, Value mass) {
      g.add_multi(op::assign_add,
                  {g.variable(state), sum_over(g, g.add(op::mul, {decision, mass}), 1)},
                  metric_ops::summed());
    };
    count(total_, predicted, positive_mass);                // true positives
    count(count_, predicted, negative_mass);                // false positives
    count(true_negatives_, not_predicted, negative_mass);   // true negatives
    count(false_negatives_, not_predicted, positive_mass);  // false negatives
  }

  float result() const override {
    if (!built_) return 0.f;
    const std::vector<float> tp = total_->value.to_vector(), fp = count_->value.to_vector(),
                             tn = true_negatives_->value.to_vector(),
                             fn = false_negatives_->value.to_vector();
    const size_t labels = o_.multi_label ? size_t(columns_) : 1;
    double weighted = 0, weight_sum = 0;
    for (size_t c = 0; c < labels; ++c) {
      Counts k;
      for (size_t i = 0; i < thresholds_.size(); ++i) {
        const size_t at = i * labels + c;
        k.tp.push_back(tp[at]), k.fp.push_back(fp[at]), k.tn.push_back(tn[at]);
        k.fn.push_back(fn[at]);
      }
      const double w = o_.multi_label && !o_.label_weights.empty() ? o_.label_weights[c] : 1.0;
      weighted += w * area(k), weight_sum += w;
    }
    return float(divide_no_nan(weighted, weight_sum));
  }

 private:
  struct Counts {
    std::vector<double> tp, fp, tn, fn;
  };

  // Keras's is_evenly_distributed_thresholds on [0] + inner + [1].
  static bool evenly_spaced(const std::vector<double>& inner) {
    std::vector<double> all{0.0};
    all.insert(all.end(), inner.begin(), inner.end());
    all.push_back(1.0);
    if (all.size() < 3) return false;
    for (size_t i = 0; i < all.size(); ++i) {
      const double even = double(float(i) / float(all.size() - 1));
      if (std::fabs(all[i] - even) > kEpsilon + 1e-5 * std::fabs(even)) return false;
    }
    return true;
  }

  // One curve's area (Keras AUC.result / interpolate_pr_auc for one label).
  double area(const Counts& k) const {
    const size_t n = thresholds_.size();
    double sum = 0;
    if (o_.curve == "PR" && o_.summation_method == "interpolation") {
      for (size_t i = 0; i + 1 < n; ++i) {
        const double dtp = k.tp[i] - k.tp[i + 1];
        const double p_a = k.tp[i] + k.fp[i], p_b = k.tp[i + 1] + k.fp[i + 1];
        const double slope = divide_no_nan(dtp, std::max(p_a - p_b, 0.0));
        const double intercept = k.tp[i + 1] - slope * p_b;
        const double ratio = p_a > 0 && p_b > 0 ? divide_no_nan(p_a, std::max(p_b, 0.0)) : 1.0;
        sum += divide_no_nan(slope * (dtp + intercept * std::log(ratio)),
                             std::max(k.tp[i + 1] + k.fn[i + 1], 0.0));
      }
      return sum;
    }
    std::vector<double> x(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      const double recall = divide_no_nan(k.tp[i], k.tp[i] + k.fn[i]);
      if (o_.curve == "ROC") {
        x[i] = divide_no_nan(k.fp[i], k.fp[i] + k.tn[i]), y[i] = recall;
      } else {
        x[i] = recall, y[i] = divide_no_nan(k.tp[i], k.tp[i] + k.fp[i]);
      }
    }
    for (size_t i = 0; i + 1 < n; ++i) {
      const double height = o_.summation_method == "interpolation" ? (y[i] + y[i + 1]) / 2
                            : o_.summation_method == "minoring"    ? std::min(y[i], y[i + 1])
                                                                   : std::max(y[i], y[i + 1]);
      sum += (x[i] - x[i + 1]) * height;
    }
    return sum;
  }

  void build(int64_t columns) {
    if (built_) {
      LS_CHECK(columns == columns_, name(), ": built for ", columns_, " labels, now given ",
               columns);
      return;
    }
    const int64_t t = int64_t(thresholds_.size());
    const Shape shape = o_.multi_label ? Shape{t, columns} : Shape{t};
    for (auto& v : vars_) v->value = Tensor::zeros(shape);
    columns_ = columns;
    built_ = true;
  }

  // Constants the step reads (not metric state: never reset, never summed).
  VariablePtr threshold_variable() {
    if (!threshold_var_) {
      std::vector<float> values(thresholds_.begin(), thresholds_.end());
      threshold_var_ = std::make_shared<Variable>(
          Variable{name() + "/thresholds",
                   Tensor::from_vector(Shape{int64_t(values.size())}, values), false});
    }
    return threshold_var_;
  }
  VariablePtr label_weight_variable() {
    if (!label_weight_var_) {
      std::vector<float> values(o_.label_weights.begin(), o_.label_weights.end());
      label_weight_var_ = std::make_shared<Variable>(
          Variable{name() + "/label_weights",
                   Tensor::from_vector(Shape{int64_t(values.size())}, values), false});
    }
    return label_weight_var_;
  }

  metrics::AUCOptions o_;
  std::vector<double> thresholds_;
  bool evenly_spaced_ = true;
  bool built_ = false;
  int64_t columns_ = 1;
  VariablePtr true_negatives_, false_negatives_, threshold_var_, label_weight_var_;
};

}  // namespace

namespace metrics {

MetricPtr AUC(AUCOptions o, const std::string& name) {
  return std::make_shared<AUCMetric>(name, std::move(o));
}

}  // namespace metrics

}  // namespace lockstep
