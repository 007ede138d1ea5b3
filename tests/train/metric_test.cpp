// Metrics accumulate total/count across batches through assign_add side effects.
#include "lockstep/metrics/metric.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "lockstep/graph/executable.h"

using namespace lockstep;

namespace {

// Compiles metric->update for fixed shapes and runs it once per batch.
struct MetricRunner {
  MetricRunner(MetricPtr m, TensorType yt_type, TensorType yp_type,
               const std::string& backend = "reference")
      : metric(std::move(m)) {
    Value yt = g.input(yt_type, "y_true");
    Value yp = g.input(yp_type, "y_pred");
    metric->update(g, yt, yp);
    CompileOptions o;
    o.backend = backend;
    exe = std::make_unique<Executable>(g, std::vector<Value>{yt, yp}, std::vector<Value>{}, o);
  }
  void run(const Tensor& yt, const Tensor& yp) {
    exe->input(0).copy_from(yt);
    exe->input(1).copy_from(yp);
    exe->run();
  }
  MetricPtr metric;
  Graph g;
  std::unique_ptr<Executable> exe;
};

}  // namespace

TEST(Metric, SparseCategoricalAccuracyOverTwoBatches) {
  for (std::string backend : {"reference", "cpu"}) {
    MetricRunner r(metrics::SparseCategoricalAccuracy(), {DType::i32, Shape{4}},
                   {DType::f32, Shape{4, 3}}, backend);
    EXPECT_EQ(r.metric->variables().size(), 2u);
    EXPECT_EQ(r.metric->variables()[0]->name, "sparse_categorical_accuracy/total");
    EXPECT_EQ(r.metric->variables()[1]->name, "sparse_categorical_accuracy/count");
    EXPECT_FALSE(r.metric->variables()[0]->trainable);
    Tensor pred = Tensor::from_vector(
        Shape{4, 3}, {0.1f, 0.8f, 0.1f, 0.7f, 0.2f, 0.1f, 0.2f, 0.3f, 0.5f, 0.3f, 0.3f, 0.4f});
    // argmax = 1, 0, 2, 2
    r.run(Tensor::from_vector_i32(Shape{4}, {1, 0, 2, 0}), pred);  // 3/4
    EXPECT_FLOAT_EQ(r.metric->result(), 0.75f) << backend;
    r.run(Tensor::from_vector_i32(Shape{4}, {0, 1, 2, 1}), pred);  // 1/4
    EXPECT_FLOAT_EQ(r.metric->result(), 0.5f) << backend;
    EXPECT_FLOAT_EQ(r.metric->variables()[1]->value.item(), 8.f);
    r.metric->reset();
    EXPECT_FLOAT_EQ(r.metric->result(), 0.f);
    r.run(Tensor::from_vector_i32(Shape{4}, {1, 0, 2, 2}), pred);
    EXPECT_FLOAT_EQ(r.metric->result(), 1.f);
  }
}

TEST(Metric, CategoricalBinaryTopKAndMse) {
  Tensor pred = Tensor::from_vector(Shape{2, 3}, {0.1f, 0.6f, 0.3f, 0.5f, 0.2f, 0.3f});
  {
    MetricRunner r(metrics::CategoricalAccuracy(), {DType::f32, Shape{2, 3}},
                   {DType::f32, Shape{2, 3}});
    r.run(Tensor::from_vector(Shape{2, 3}, {0, 1, 0, 0, 0, 1}), pred);  // 1/2
    r.run(Tensor::from_vector(Shape{2, 3}, {0, 1, 0, 1, 0, 0}), pred);  // 2/2
    EXPECT_FLOAT_EQ(r.metric->result(), 0.75f);
  }
  {
    MetricRunner r(metrics::SparseTopKCategoricalAccuracy(2), {DType::i32, Shape{2}},
                   {DType::f32, Shape{2, 3}});
    r.run(Tensor::from_vector_i32(Shape{2}, {2, 1}), pred);  // top2: {1,2} has 2; {0,2} lacks 1
    r.run(Tensor::from_vector_i32(Shape{2}, {0, 0}), pred);  // no; yes
    EXPECT_FLOAT_EQ(r.metric->result(), 0.5f);
  }
  {
    MetricRunner r(metrics::BinaryAccuracy(), {DType::f32, Shape{4}}, {DType::f32, Shape{4, 1}});
    r.run(Tensor::from_vector(Shape{4}, {1, 0, 1, 0}),
          Tensor::from_vector(Shape{4, 1}, {0.9f, 0.2f, 0.4f, 0.7f}));
    r.run(Tensor::from_vector(Shape{4}, {1, 1, 1, 1}),
          Tensor::from_vector(Shape{4, 1}, {0.9f, 0.6f, 0.4f, 0.7f}));
    EXPECT_FLOAT_EQ(r.metric->result(), 5.f / 8.f);
  }
  {
    MetricRunner r(metrics::get("mse", "MeanSquaredError"), {DType::f32, Shape{2, 2}},
                   {DType::f32, Shape{2, 2}});
    EXPECT_EQ(r.metric->name(), "mse");
    r.run(Tensor::from_vector(Shape{2, 2}, {0, 0, 0, 0}),
          Tensor::from_vector(Shape{2, 2}, {1, 1, 2, 2}));
    r.run(Tensor::from_vector(Shape{2, 2}, {0, 0, 0, 0}),
          Tensor::from_vector(Shape{2, 2}, {0, 0, 3, 3}));
    EXPECT_FLOAT_EQ(r.metric->result(), (1 + 4 + 0 + 9) / 4.f);
  }
  {
    // Mean ignores y_true, so only y_pred is fed (the executable rejects unused inputs).
    auto m = metrics::Mean("loss");
    Graph g;
    Value v = g.input({DType::f32, Shape{3}}, "v");
    m->update(g, v, v);
    Executable exe(g, {v}, {}, {.backend = "reference"});
    exe.input(0).copy_from(Tensor::from_vector(Shape{3}, {1, 2, 3}));
    exe.run();
    exe.input(0).copy_from(Tensor::from_vector(Shape{3}, {4, 5, 6}));
    exe.run();
    EXPECT_FLOAT_EQ(m->result(), 3.5f);
  }
}

TEST(Metric, GetResolvesAccuracyByLoss) {
  Graph g;
  Value yi = g.input({DType::i32, Shape{2}}, "yi");
  Value yf = g.input({DType::f32, Shape{2, 3}}, "yf");
  Value p = g.input({DType::f32, Shape{2, 3}}, "p");
  auto last_op = [&] { return g.node(g.size() - 1).op; };
  auto uses = [&](const std::string& op) {
    for (auto& n : g.nodes())
      if (n.op == OpId::named(op)) return true;
    return false;
  };
  auto m = metrics::get("accuracy", "SparseCategoricalCrossentropy");
  EXPECT_EQ(m->name(), "accuracy");  // Keras keeps the user's name
  m->update(g, yi, p);
  EXPECT_TRUE(uses("sparse_categorical_accuracy"));
  auto c = metrics::get("acc", "categorical_crossentropy");
  EXPECT_EQ(c->name(), "acc");
  c->update(g, yf, p);
  EXPECT_TRUE(uses("categorical_accuracy"));
  auto b = metrics::get("accuracy", "binary_crossentropy");
  b->update(g, yf, p);
  EXPECT_TRUE(uses("binary_accuracy"));
  auto k = metrics::get("sparse_top_k_categorical_accuracy", "sparse_categorical_crossentropy");
  EXPECT_EQ(k->name(), "sparse_top_k_categorical_accuracy");
  k->update(g, yi, p);
  EXPECT_TRUE(uses("in_top_k"));
  EXPECT_EQ(last_op(), op::assign_add);
  EXPECT_EQ(metrics::get("top_k", "sparse_categorical_crossentropy")->name(), "top_k");
  EXPECT_THROW(metrics::get("f1_of_doom", "mse"), Error);
}

namespace {

// Precision / recall computed directly: every entry (or column class_id) a binary decision,
// y_pred > threshold positive, with top_k only the k largest of a row (by sorting) eligible.
struct Counts {
  double tp = 0, fp = 0, fn = 0;
};
Counts confusion(const std::vector<float>& y, const std::vector<float>& p, int64_t classes,
                 double threshold, int64_t class_id = -1, int64_t top_k = 0) {
  Counts c;
  const int64_t rows = int64_t(p.size()) / classes;
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<float> row(p.begin() + i * classes, p.begin() + (i + 1) * classes);
    std::vector<float> sorted = row;
    std::sort(sorted.rbegin(), sorted.rend());
    for (int64_t j = 0; j < classes; ++j) {
      if (class_id >= 0 && j != class_id) continue;
      bool eligible = top_k == 0 || row[size_t(j)] >= sorted[size_t(top_k - 1)];
      bool positive = eligible && row[size_t(j)] > float(threshold);  // float32, as Keras
      bool label = y[size_t(i * classes + j)] > 0.5f;
      c.tp += label && positive;
      c.fp += !label && positive;
      c.fn += label && !positive;
    }
  }
  return c;
}

const std::vector<float> kMultiLabel = {1, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0};
const std::vector<float> kScores = {0.7f, 0.6f,  0.1f, 0.4f,  0.9f,  0.3f,
                                    0.2f, 0.35f, 0.8f, 0.55f, 0.45f, 0.05f};

}  // namespace

TEST(Metric, PrecisionAndRecallThresholdsClassIdTopK) {
  struct Case {
    metrics::ConfusionOptions options;
    std::vector<double> thresholds;  // as the reference sees them
  };
  std::vector<Case> cases = {{{}, {0.5}},
                             {{.thresholds = {0.3, 0.65}}, {0.3, 0.65}},
                             {{.class_id = 1}, {0.5}},
                             {{.top_k = 1}, {-1e10}},
                             {{.thresholds = {0.5}, .class_id = 0, .top_k = 2}, {0.5}}};
  Tensor y = Tensor::from_vector(Shape{4, 3}, kMultiLabel);
  Tensor p = Tensor::from_vector(Shape{4, 3}, kScores);
  for (auto& c : cases) {
    for (bool recall : {false, true}) {
      MetricRunner r(recall ? metrics::Recall(c.options) : metrics::Precision(c.options),
                     {DType::f32, Shape{4, 3}}, {DType::f32, Shape{4, 3}}, "cpu");
      r.run(y, p);
      r.run(y, p);  // two batches: the counts add up, the ratio stays
      std::vector<float> got = metrics::threshold_values(*r.metric);
      ASSERT_EQ(got.size(), c.thresholds.size());
      for (size_t t = 0; t < got.size(); ++t) {
        Counts k = confusion(kMultiLabel, kScores, 3, c.thresholds[t], c.options.class_id,
                             c.options.top_k);
        double want = recall ? k.tp / (k.tp + k.fn) : k.tp / (k.tp + k.fp);
        EXPECT_NEAR(got[t], want, 1e-6) << (recall ? "recall" : "precision") << " case "
                                        << (&c - cases.data()) << " threshold " << t;
      }
      EXPECT_FLOAT_EQ(r.metric->result(), got[0]);
    }
  }
  // Hand-checked: threshold 0.5 -> positives (0,0) (0,1) (1,1) (2,2) (3,0), of which (0,0)
  // (1,1) (3,0) are labelled; 6 labels -> precision 3/5, recall 3/6.
  MetricRunner precision(metrics::get("precision", "binary_crossentropy"),
                         {DType::f32, Shape{4, 3}}, {DType::f32, Shape{4, 3}});
  precision.run(y, p);
  EXPECT_FLOAT_EQ(precision.metric->result(), 0.6f);
  MetricRunner recall(metrics::get("recall", "binary_crossentropy"), {DType::f32, Shape{4, 3}},
                      {DType::f32, Shape{4, 3}});
  recall.run(y, p);
  EXPECT_FLOAT_EQ(recall.metric->result(), 0.5f);
  EXPECT_THROW(metrics::Precision({.thresholds = {1.5}}), Error);
}

TEST(Metric, TopKCategoricalAccuracyTakesOneHotLabels) {
  Tensor pred = Tensor::from_vector(Shape{2, 3}, {0.1f, 0.6f, 0.3f, 0.5f, 0.2f, 0.3f});
  MetricRunner r(metrics::get("top_k_categorical_accuracy", "categorical_crossentropy"),
                 {DType::f32, Shape{2, 3}}, {DType::f32, Shape{2, 3}});
  EXPECT_EQ(r.metric->name(), "top_k_categorical_accuracy");
  bool uses_in_top_k = false;
  for (auto& n : r.g.nodes()) uses_in_top_k |= n.op == op::in_top_k;
  EXPECT_FALSE(uses_in_top_k);                                        // not the sparse variant
  r.run(Tensor::from_vector(Shape{2, 3}, {0, 0, 1, 0, 1, 0}), pred);  // k=5 of 3 classes: all hit
  EXPECT_FLOAT_EQ(r.metric->result(), 1.f);
  MetricRunner k2(metrics::TopKCategoricalAccuracy(2), {DType::f32, Shape{2, 3}},
                  {DType::f32, Shape{2, 3}});
  // row 0: class 2 (0.3), only 0.6 higher -> hit; row 1: class 1 (0.2), two higher -> miss.
  k2.run(Tensor::from_vector(Shape{2, 3}, {0, 0, 1, 0, 1, 0}), pred);
  // row 0: class 0 (0.1) -> miss; row 1: class 2 (0.3), only 0.5 higher -> hit.
  k2.run(Tensor::from_vector(Shape{2, 3}, {1, 0, 0, 0, 0, 1}), pred);
  EXPECT_FLOAT_EQ(k2.metric->result(), 0.5f);
  Graph g;
  Value labels = g.input({DType::i32, Shape{2}}, "y");
  Value scores = g.input({DType::f32, Shape{2, 3}}, "p");
  EXPECT_THROW(metrics::TopKCategoricalAccuracy(2)->update(g, labels, scores), Error);
}

TEST(Metric, MeanAbsoluteError) {
  MetricRunner r(metrics::get("mae", "mse"), {DType::f32, Shape{2, 2}}, {DType::f32, Shape{2, 2}});
  r.run(Tensor::from_vector(Shape{2, 2}, {0, 1, 2, 3}),
        Tensor::from_vector(Shape{2, 2}, {1, 1, 0, 0}));
  r.run(Tensor::from_vector(Shape{2, 2}, {0, 0, 0, 0}),
        Tensor::from_vector(Shape{2, 2}, {-1, 1, 0.5f, 0.5f}));
  // per-sample means: (1 + 0) / 2, (2 + 3) / 2, (1 + 1) / 2, (0.5 + 0.5) / 2
  EXPECT_FLOAT_EQ(r.metric->result(), (0.5f + 2.5f + 1.f + 0.5f) / 4.f);
}

TEST(Metric, F1AndFBetaScoreAverages) {
  // Keras FBetaScore written out: per class P = tp / (tp + fp + eps), R = tp / (tp + fn + eps),
  // F = (1 + b^2) P R / (b^2 P + R + eps); micro pools the counts first.
  const double eps = 1e-7;
  auto score = [&](double tp, double fp, double fn, double beta) {
    double p = tp / (tp + fp + eps), r = tp / (tp + fn + eps);
    return (1 + beta * beta) * p * r / (beta * beta * p + r + eps);
  };
  auto reference = [&](const std::string& average, double beta, double threshold) {
    std::vector<double> tp(3), fp(3), fn(3), mass(3);
    for (int i = 0; i < 4; ++i) {
      float row_max = *std::max_element(kScores.begin() + 3 * i, kScores.begin() + 3 * i + 3);
      for (int c = 0; c < 3; ++c) {
        float s = kScores[size_t(3 * i + c)];
        bool positive = threshold < 0 ? s == row_max : s > float(threshold);
        bool label = kMultiLabel[size_t(3 * i + c)] > 0.5f;
        tp[size_t(c)] += positive && label, fp[size_t(c)] += positive && !label;
        fn[size_t(c)] += !positive && label, mass[size_t(c)] += label;
      }
    }
    if (average == "micro")
      return score(tp[0] + tp[1] + tp[2], fp[0] + fp[1] + fp[2], fn[0] + fn[1] + fn[2], beta);
    double total = 0, mass_sum = mass[0] + mass[1] + mass[2];
    for (size_t c = 0; c < 3; ++c)
      total +=
          score(tp[c], fp[c], fn[c], beta) * (average == "weighted" ? mass[c] / mass_sum : 1.0 / 3);
    return total;
  };
  Tensor y = Tensor::from_vector(Shape{4, 3}, kMultiLabel);
  Tensor p = Tensor::from_vector(Shape{4, 3}, kScores);
  for (std::string average : {"", "micro", "macro", "weighted"})
    for (double beta : {1.0, 2.0})
      for (double threshold : {-1.0, 0.5}) {
        MetricRunner r(metrics::FBetaScore(average, beta, threshold), {DType::f32, Shape{4, 3}},
                       {DType::f32, Shape{4, 3}}, "cpu");
        r.run(y, p);
        r.run(y, p);  // counts double, scores stay
        EXPECT_NEAR(r.metric->result(), reference(average, beta, threshold), 1e-5)
            << average << " beta " << beta << " threshold " << threshold;
        EXPECT_EQ(metrics::class_scores(*r.metric).size(), average == "micro" ? 1u : 3u);
      }
  // Hand-checked, threshold 0.5, class 0: predicted rows 0, 3 (both labelled), labels rows
  // 0, 1, 3 -> P = 1, R = 2/3, F1 = 0.8.
  MetricRunner f1(metrics::F1Score("", 0.5), {DType::f32, Shape{4, 3}}, {DType::f32, Shape{4, 3}});
  f1.run(y, p);
  EXPECT_NEAR(metrics::class_scores(*f1.metric)[0], 0.8, 1e-5);
  EXPECT_THROW(metrics::F1Score("median"), Error);
}

TEST(Metric, ConfusionMatrixCountsTrueByPredicted) {
  // labels 0 1 2 1, predicted (argmax of the scores) 0 2 2 0 -> (0,0) (1,2) (2,2) (1,0).
  Tensor scores = Tensor::from_vector(
      Shape{4, 3}, {0.8f, 0.1f, 0.1f, 0.2f, 0.3f, 0.5f, 0.1f, 0.1f, 0.8f, 0.6f, 0.3f, 0.1f});
  Tensor cm = metrics::confusion_matrix(Tensor::from_vector_i32(Shape{4}, {0, 1, 2, 1}), scores);
  EXPECT_EQ(cm.shape(), (Shape{3, 3}));
  EXPECT_EQ(cm.to_vector(), (std::vector<float>{1, 0, 0, 1, 0, 1, 0, 0, 1}));
  Tensor wide = metrics::confusion_matrix(Tensor::from_vector_i32(Shape{2}, {0, 1}),
                                          Tensor::from_vector_i32(Shape{2}, {1, 1}), 4);
  EXPECT_EQ(wide.shape(), (Shape{4, 4}));
  EXPECT_EQ(wide.to_vector()[1], 1.f);  // true 0, predicted 1
  EXPECT_EQ(wide.to_vector()[5], 1.f);  // true 1, predicted 1
  EXPECT_THROW(metrics::confusion_matrix(Tensor::from_vector_i32(Shape{1}, {5}),
                                         Tensor::from_vector_i32(Shape{1}, {0}), 3),
               Error);
}
