// Keras losses composed from graph ops; each returns per-sample values [N].
#include <algorithm>

#include "lockstep/train/loss.h"
#include "train/names.h"

namespace lockstep {

namespace {

constexpr double kEpsilon = 1e-7;  // keras.backend.epsilon()

Attrs axes_attr(std::vector<int64_t> axes, bool keepdims = false) {
  return Attrs{{"axes", std::move(axes)}, {"keepdims", keepdims}};
}

// clip(p, eps, 1 - eps) as Keras does before taking logs of probabilities.
Value clip_probs(Graph& g, Value p) {
  Value lo = g.add("maximum", {p, g.scalar(float(kEpsilon))});
  return g.add("minimum", {lo, g.scalar(float(1.0 - kEpsilon))});
}

// Reshapes targets of rank r-1 (e.g. [N]) to the prediction's shape (e.g. [N, 1]).
Value match_rank(Graph& g, Value y_true, Value y_pred) {
  const Shape& t = g.type(y_true).shape;
  const Shape& p = g.type(y_pred).shape;
  if (t.rank() + 1 == p.rank() && p[-1] == 1) {
    std::vector<int64_t> s = p.vec();
    s[0] = -1;
    return g.add("reshape", {y_true}, Attrs{{"shape", s}});
  }
  return y_true;
}

// Mean over the last axis (per-sample value) when there is one beyond the batch.
Value mean_last_axis(Graph& g, Value x) {
  if (g.type(x).shape.rank() < 2) return x;
  return g.add("reduce_mean", {x}, axes_attr({-1}));
}

// Labels as int32 of shape [N] (accepts [N, 1] and float labels).
Value sparse_labels(Graph& g, Value labels) {
  const TensorType& t = g.type(labels);
  if (t.shape.rank() == 2 && t.shape[1] == 1)
    labels = g.add("reshape", {labels}, Attrs{{"shape", std::vector<int64_t>{-1}}});
  if (t.dtype != DType::i32) labels = g.add("cast", {labels}, Attrs{{"dtype", std::string("int32")}});
  return labels;
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
    return o_.from_logits ? y_pred : g.add("log", {clip_probs(g, y_pred)});
  }
  losses::CrossentropyOptions o_;
};

class SparseCCE : public CrossentropyBase {
 public:
  using CrossentropyBase::CrossentropyBase;
  std::string name() const override { return "SparseCategoricalCrossentropy"; }
  DType label_dtype() const override { return DType::i32; }
  json get_config() const override {
    return {{"name", "sparse_categorical_crossentropy"}, {"reduction", "sum_over_batch_size"},
            {"from_logits", o_.from_logits}, {"ignore_class", nullptr}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    return g.add("sparse_softmax_cross_entropy", {logits(g, y_pred), sparse_labels(g, y_true)},
                 Attrs{{"label_smoothing", o_.label_smoothing}});
  }
};

class CCE : public CrossentropyBase {
 public:
  using CrossentropyBase::CrossentropyBase;
  std::string name() const override { return "CategoricalCrossentropy"; }
  json get_config() const override {
    return {{"name", "categorical_crossentropy"}, {"reduction", "sum_over_batch_size"},
            {"from_logits", o_.from_logits}, {"label_smoothing", o_.label_smoothing},
            {"axis", -1}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    return g.add("softmax_cross_entropy", {logits(g, y_pred), y_true},
                 Attrs{{"label_smoothing", o_.label_smoothing}});
  }
};

class BCE : public CrossentropyBase {
 public:
  using CrossentropyBase::CrossentropyBase;
  std::string name() const override { return "BinaryCrossentropy"; }
  json get_config() const override {
    return {{"name", "binary_crossentropy"}, {"reduction", "sum_over_batch_size"},
            {"from_logits", o_.from_logits}, {"label_smoothing", o_.label_smoothing},
            {"axis", -1}};
  }
  Value per_sample(Graph& g, Value y_true, Value y_pred) const override {
    Value y = match_rank(g, y_true, y_pred);
    if (o_.label_smoothing > 0)  // y * (1 - ls) + 0.5 * ls
      y = g.add("scale_shift", {y}, Attrs{{"scale", 1.0 - o_.label_smoothing},
                                          {"shift", 0.5 * o_.label_smoothing}});
    Value elem;
    if (o_.from_logits) {
      elem = g.add("sigmoid_cross_entropy", {y_pred, y});
    } else {
      // -(y log p + (1 - y) log(1 - p)) with p clipped to [eps, 1 - eps].
      Value p = clip_probs(g, y_pred);
      auto one_minus = [&](Value x) {
        return g.add("scale_shift", {x}, Attrs{{"scale", -1.0}, {"shift", 1.0}});
      };
      Value pos = g.add("mul", {y, g.add("log", {p})});
      Value neg = g.add("mul", {one_minus(y), g.add("log", {one_minus(p)})});
      elem = g.add("neg", {g.add("add", {pos, neg})});
    }
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
    return mean_last_axis(g, g.add("square", {g.add("sub", {y_pred, y})}));
  }
};

}  // namespace

namespace losses {

LossPtr SparseCategoricalCrossentropy(CrossentropyOptions o) { return std::make_shared<SparseCCE>(o); }
LossPtr CategoricalCrossentropy(CrossentropyOptions o) { return std::make_shared<CCE>(o); }
LossPtr BinaryCrossentropy(CrossentropyOptions o) { return std::make_shared<BCE>(o); }
LossPtr MeanSquaredError() { return std::make_shared<MSE>(); }

LossPtr get(const std::string& name) {
  const std::string c = canonical_name(name);
  if (c == "sparsecategoricalcrossentropy") return SparseCategoricalCrossentropy();
  if (c == "categoricalcrossentropy") return CategoricalCrossentropy();
  if (c == "binarycrossentropy" || c == "bce") return BinaryCrossentropy();
  if (c == "mse" || c == "meansquarederror") return MeanSquaredError();
  LS_FAIL("unknown loss '", name,
          "' (known: sparse_categorical_crossentropy, categorical_crossentropy, "
          "binary_crossentropy, mse)");
}

}  // namespace losses

}  // namespace lockstep
