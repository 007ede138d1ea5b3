// Keras losses composed from graph ops; each returns per-sample values [N].
#include <algorithm>

#include "lockstep/losses/loss.h"
#include "losses/internal/metric_ops.h"
#include "nn/internal/names.h"

namespace lockstep {

namespace {

using metric_ops::sparse_labels;

constexpr double kEpsilon = 1e-7;  // keras.backend.epsilon()

Attrs axes_attr(std::vector<int64_t> axes, bool keepdims = false) {
  return Attrs{{"axes", std::move(axes)}, {"keepdims", keepdims}};
}

// clip(p, eps, 1 - eps) as Keras does before taking logs of probabilities.
Value clip_probs(Graph& g, Value p) {
  Value lo = g.add(op::maximum, {p, g.scalar(float(kEpsilon))});
  return g.add(op::minimum, {lo, g.scalar(float(1.0 - kEpsilon))});
}

// Reshapes targets of rank r-1 (e.g. [N]) to the prediction's shape (e.g. [N, 1]).
Value match_rank(Graph& g, Value y_true, Value y_pred) {
  const Shape& t = g.type(y_true).shape;
  const Shape& p = g.type(y_pred).shape;
  if (t.rank() + 1 == p.rank() && p[-1] == 1) {
    std::vector<int64_t> s = p.vec();
    s[0] = -1;
    return g.add(op::reshape, {y_true}, Attrs{{"shape", s}});
  }
  return y_true;
}

// Mean over the last axis (per-sample value) when there is one beyond the batch.
Value mean_last_axis(Graph& g, Value x) {
  if (g.type(x).shape.rank() < 2) return x;
  return g.add(op::reduce_mean, {x}, axes_attr({-1}));
}

Value one_minus(Graph& g, Value x) {
  return g.add(op::scale_shift, {x}, Attrs{{"scale", -1.0}, {"shift", 1.0}});
}

// Elementwise -(y log p + (1 - y) log(1 - p)) with p clipped to [eps, 1 - eps].
Value binary_crossentropy_of_probs(Graph& g, Value y, Value probs) {
  Value p = clip_probs(g, probs);
  Value pos = g.add(op::mul, {y, g.add(op::log, {p})});
  Value neg = g.add(op::mul, {one_minus(g, y), g.add(op::log, {one_minus(g, p)})});
  return g.add(op::neg, {g.add(op::add, {pos, neg})});
}

// (1 - x)^gamma for x in [0, 1] (the focal losses' modulating factor): exact for gamma 0, 1
// and 2 (Keras's default), else exp(gamma log(1 - x)) with 1 - x kept above 1e-30.
Value focal_factor(Graph& g, Value x, double gamma) {
  Value rest = one_minus(g, x);
  if (gamma == 0.0) return g.add(op::scale_shift, {x}, Attrs{{"scale", 0.0}, {"shift", 1.0}});
  if (gamma == 1.0) return rest;
  if (gamma == 2.0) return g.add(op::square, {rest});
  Value log_rest = g.add(op::log, {g.add(op::maximum, {rest, g.scalar(1e-30f)})});
  return g.add(op::exp,
               {g.add(op::scale_shift, {log_rest}, Attrs{{"scale", gamma}, {"shift", 0.0}})});
}

class CrossentropyBase : public Loss {
 public:
  explicit CrossentropyBase(losses::CrossentropyOptions o) : o_(o) {
    LS_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1,
             "label_smoothing must be in [0, 1], got ", o.label_smoothing);
  }

 protected:
  // Logits for the softmax ops: the logits themselves, or log(clip(p)) for probabilities
  // (log_softmax(log p) == log(p / sum(p)), Keras's normalise-then-log path).
  Value logits(Graph& g, Value y_pred) const {
    return o_.from_logits ? y_pred : g.add(op::log, {clip_probs(g, y_pred)});
  }
  losses::CrossentropyOptions o_;
};

class SparseCCE : public CrossentropyBase {
 public:
  using CrossentropyBase::CrossentropyBase;
  std::string name() const override { return "SparseCategoricalCrossentropy"; }
  DType label_dtype() const override { return DType::i32; }
  json get_config() const override {
    return {{"name", "sparse_categorical_crossentropy"},
            {"reduction", "sum_over_batch_size"},
            {"from_logits", o_.from_logits},
            {"ignore_class", nullptr}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    return g.add(op::sparse_softmax_cross_entropy, {logits(g, y_pred), sparse_labels(g, y_true)},
                 Attrs{{"label_smoothing", o_.label_smoothing}});
  }
};

class CCE : public CrossentropyBase {
 public:
  using CrossentropyBase::CrossentropyBase;
  std::string name() const override { return "CategoricalCrossentropy"; }
  json get_config() const override {
    return {{"name", "categorical_crossentropy"},
            {"reduction", "sum_over_batch_size"},
            {"from_logits", o_.from_logits},
            {"label_smoothing", o_.label_smoothing},
            {"axis", -1}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    return g.add(op::softmax_cross_entropy, {logits(g, y_pred), y_true},
                 Attrs{{"label_smoothing", o_.label_smoothing}});
  }
};

class BCE : public CrossentropyBase {
 public:
  using CrossentropyBase::CrossentropyBase;
  std::string name() const override { return "BinaryCrossentropy"; }
  json get_config() const override {
    return {{"name", "binary_crossentropy"},
            {"reduction", "sum_over_batch_size"},
            {"from_logits", o_.from_logits},
            {"label_smoothing", o_.label_smoothing},
            {"axis", -1}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = match_rank(g, y_true, y_pred);
    if (o_.label_smoothing > 0)  // y * (1 - ls) + 0.5 * ls
      y = g.add(op::scale_shift, {y},
                Attrs{{"scale", 1.0 - o_.label_smoothing}, {"shift", 0.5 * o_.label_smoothing}});
    Value elem = o_.from_logits ? g.add(op::sigmoid_cross_entropy, {y_pred, y})
                                : binary_crossentropy_of_probs(g, y, y_pred);
    return mean_last_axis(g, elem);
  }
};

class MSE : public Loss {
 public:
  std::string name() const override { return "MeanSquaredError"; }
  json get_config() const override {
    return {{"name", "mean_squared_error"}, {"reduction", "sum_over_batch_size"}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = match_rank(g, y_true, y_pred);
    return mean_last_axis(g, g.add(op::square, {g.add(op::sub, {y_pred, y})}));
  }
};

void check_focal(const losses::FocalOptions& o) {
  LS_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1,
           "label_smoothing must be in [0, 1], got ", o.label_smoothing);
  LS_CHECK(o.gamma >= 0, "focal loss: gamma must be >= 0, got ", o.gamma);
}

// Keras binary_focal_crossentropy: mean over the last axis of
// (1 - p_t)^gamma * bce(y, p) [* (y alpha + (1 - y)(1 - alpha)) with class balancing],
// p_t = y p + (1 - y)(1 - p), p = sigmoid(y_pred) with from_logits.
class BinaryFocal : public Loss {
 public:
  explicit BinaryFocal(losses::FocalOptions o) : o_(o) { check_focal(o); }
  std::string name() const override { return "BinaryFocalCrossentropy"; }
  json get_config() const override {
    return {{"name", "binary_focal_crossentropy"},
            {"reduction", "sum_over_batch_size"},
            {"apply_class_balancing", o_.apply_class_balancing},
            {"alpha", o_.alpha},
            {"gamma", o_.gamma},
            {"from_logits", o_.from_logits},
            {"label_smoothing", o_.label_smoothing},
            {"axis", -1}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = match_rank(g, y_true, y_pred);
    if (o_.label_smoothing > 0)
      y = g.add(op::scale_shift, {y},
                Attrs{{"scale", 1.0 - o_.label_smoothing}, {"shift", 0.5 * o_.label_smoothing}});
    Value p = o_.from_logits ? g.add(op::sigmoid, {y_pred}) : y_pred;
    Value y_times_p = g.add(op::mul, {y, p});
    Value p_t = g.add(op::add, {y_times_p, g.add(op::mul, {one_minus(g, y), one_minus(g, p)})});
    Value bce = binary_crossentropy_of_probs(g, y, p);
    Value focal = g.add(op::mul, {focal_factor(g, p_t, o_.gamma), bce});
    if (o_.apply_class_balancing)  // y alpha + (1 - y)(1 - alpha)
      focal = g.add(op::mul,
                    {focal, g.add(op::scale_shift, {y},
                                  Attrs{{"scale", 2 * o_.alpha - 1}, {"shift", 1 - o_.alpha}})});
    return mean_last_axis(g, focal);
  }

 private:
  losses::FocalOptions o_;
};

// Keras categorical_focal_crossentropy: sum over classes of
// -alpha (1 - q)^gamma y log(q), q = clip(p / sum(p)), p = softmax(y_pred) with from_logits.
class CategoricalFocal : public Loss {
 public:
  explicit CategoricalFocal(losses::FocalOptions o) : o_(o) { check_focal(o); }
  std::string name() const override { return "CategoricalFocalCrossentropy"; }
  json get_config() const override {
    return {{"name", "categorical_focal_crossentropy"},
            {"reduction", "sum_over_batch_size"},
            {"alpha", o_.alpha},
            {"gamma", o_.gamma},
            {"from_logits", o_.from_logits},
            {"label_smoothing", o_.label_smoothing},
            {"axis", -1}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = y_true;
    const Shape& ps = g.type(y_pred).shape;
    LS_CHECK(g.type(y_true).shape == ps,
             "CategoricalFocalCrossentropy needs one-hot labels of "
             "the predictions' shape ",
             ps.str(), ", got ", g.type(y_true).shape.str());
    if (o_.label_smoothing > 0)
      y = g.add(op::scale_shift, {y},
                Attrs{{"scale", 1.0 - o_.label_smoothing},
                      {"shift", o_.label_smoothing / double(ps[-1])}});
    Value p = o_.from_logits ? g.add(op::softmax, {y_pred}) : y_pred;
    Value total = g.add(op::reduce_sum, {p}, axes_attr({-1}, true));
    Value q = clip_probs(g, g.add(op::div, {p, total}));
    Value cce = g.add(op::neg, {g.add(op::mul, {y, g.add(op::log, {q})})});
    Value weight = g.add(op::scale_shift, {focal_factor(g, q, o_.gamma)},
                         Attrs{{"scale", o_.alpha}, {"shift", 0.0}});
    return g.add(op::reduce_sum, {g.add(op::mul, {weight, cce})}, axes_attr({-1}));
  }

 private:
  losses::FocalOptions o_;
};

class MAE : public Loss {
 public:
  std::string name() const override { return "MeanAbsoluteError"; }
  json get_config() const override {
    return {{"name", "mean_absolute_error"}, {"reduction", "sum_over_batch_size"}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = match_rank(g, y_true, y_pred);
    return mean_last_axis(g, g.add(op::abs, {g.add(op::sub, {y_pred, y})}));
  }
};

// Keras Huber: 0.5 e^2 where |e| <= delta, else delta (|e| - 0.5 delta), written without a
// select as 0.5 q^2 + delta (|e| - q) with q = min(|e|, delta).
class HuberLoss : public Loss {
 public:
  explicit HuberLoss(double delta) : delta_(delta) {
    LS_CHECK(delta > 0, "Huber: delta must be positive, got ", delta);
  }
  std::string name() const override { return "Huber"; }
  json get_config() const override {
    return {{"name", "huber_loss"}, {"reduction", "sum_over_batch_size"}, {"delta", delta_}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = match_rank(g, y_true, y_pred);
    Value abs_error = g.add(op::abs, {g.add(op::sub, {y_pred, y})});
    Value quadratic = g.add(op::minimum, {abs_error, g.scalar(float(delta_))});
    Value linear = g.add(op::sub, {abs_error, quadratic});
    Value half_square = g.add(op::scale_shift, {g.add(op::square, {quadratic})},
                              Attrs{{"scale", 0.5}, {"shift", 0.0}});
    Value scaled_linear =
        g.add(op::scale_shift, {linear}, Attrs{{"scale", delta_}, {"shift", 0.0}});
    return mean_last_axis(g, g.add(op::add, {half_square, scaled_linear}));
  }

 private:
  double delta_;
};

// Keras KLDivergence: sum(t * log(t / p), axis=-1) with t and p clipped to [eps, 1].
class KLD : public Loss {
 public:
  std::string name() const override { return "KLDivergence"; }
  json get_config() const override {
    return {{"name", "kl_divergence"}, {"reduction", "sum_over_batch_size"}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    auto clip = [&](Value x) {
      return g.add(op::minimum,
                   {g.add(op::maximum, {x, g.scalar(float(kEpsilon))}), g.scalar(1.f)});
    };
    Value t = clip(match_rank(g, y_true, y_pred)), p = clip(y_pred);
    Value elem = g.add(op::mul, {t, g.add(op::sub, {g.add(op::log, {t}), g.add(op::log, {p})})});
    if (g.type(elem).shape.rank() < 2) return elem;
    return g.add(op::reduce_sum, {elem}, axes_attr({-1}));
  }
};

}  // namespace

namespace losses {

LossPtr SparseCategoricalCrossentropy(CrossentropyOptions o) {
  return std::make_shared<SparseCCE>(o);
}
LossPtr CategoricalCrossentropy(CrossentropyOptions o) { return std::make_shared<CCE>(o); }
LossPtr BinaryCrossentropy(CrossentropyOptions o) { return std::make_shared<BCE>(o); }
LossPtr MeanSquaredError() { return std::make_shared<MSE>(); }
LossPtr MeanAbsoluteError() { return std::make_shared<MAE>(); }
LossPtr Huber(double delta) { return std::make_shared<HuberLoss>(delta); }
LossPtr KLDivergence() { return std::make_shared<KLD>(); }
LossPtr BinaryFocalCrossentropy(FocalOptions o) { return std::make_shared<BinaryFocal>(o); }
LossPtr CategoricalFocalCrossentropy(FocalOptions o) {
  return std::make_shared<CategoricalFocal>(o);
}

LossPtr get(const std::string& name) {
  const std::string c = canonical_name(name);
  if (c == "sparsecategoricalcrossentropy") return SparseCategoricalCrossentropy();
  if (c == "categoricalcrossentropy") return CategoricalCrossentropy();
  if (c == "binarycrossentropy" || c == "bce") return BinaryCrossentropy();
  if (c == "mse" || c == "meansquarederror") return MeanSquaredError();
  if (c == "mae" || c == "meanabsoluteerror") return MeanAbsoluteError();
  if (c == "huber" || c == "huberloss") return Huber();
  if (c == "kld" || c == "kldivergence" || c == "kullbackleiblerdivergence") return KLDivergence();
  if (c == "binaryfocalcrossentropy") return BinaryFocalCrossentropy();
  if (c == "categoricalfocalcrossentropy") return CategoricalFocalCrossentropy();
  LS_FAIL("unknown loss '", name,
          "' (known: sparse_categorical_crossentropy, categorical_crossentropy, "
          "binary_crossentropy, mse, mae, huber, kl_divergence, binary_focal_crossentropy, "
          "categorical_focal_crossentropy)");
}

}  // namespace losses

}  // namespace lockstep
