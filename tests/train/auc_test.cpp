// keras.metrics.AUC against Keras 3.15.1 (JAX): the values below come from
//
//   import numpy as np, keras
//   y = np.array([[1,0],[0,0],[1,1],[1,0],[0,1],[0,0],[1,1],[0,1],[1,0],[0,0]], "float32")
//   p = np.array([[0.9,0.2],[0.35,0.6],[0.62,0.71],[0.4,0.05],[0.55,0.8],[0.1,0.45],
//                 [0.77,0.3],[0.2,0.66],[0.5,0.15],[0.68,0.25]], "float32")
//   w = np.array([1,2,0.5,1.5,1,3,1,0.25,2,1], "float32")
//   for c in cases:   # the options of each row of kCases
//       m = keras.metrics.AUC(**c); m.update_state(y, p); plain = float(m.result())
//       m = keras.metrics.AUC(**c); m.update_state(y, p, sample_weight=w)
//       weighted = float(m.result())
//
// The predictions go through an identity model and evaluate(), in batches of 4 (so the counts
// are summed over batches), on one device and on 2 mirrored replicas (summed over replicas).
#include <gtest/gtest.h>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"

using namespace lockstep;
namespace ds = lockstep::distribute;

namespace {

const std::vector<float> kLabels = {1, 0, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 0};
const std::vector<float> kScores = {0.9f,  0.2f,  0.35f, 0.6f,  0.62f, 0.71f, 0.4f,
                                    0.05f, 0.55f, 0.8f,  0.1f,  0.45f, 0.77f, 0.3f,
                                    0.2f,  0.66f, 0.5f,  0.15f, 0.68f, 0.25f};
const std::vector<float> kWeights = {1, 2, 0.5f, 1.5f, 1, 3, 1, 0.25f, 2, 1};

struct Case {
  const char* what;
  metrics::AUCOptions options;
  double plain, weighted;
};

const std::vector<Case> kCases = {
    {"default (ROC, 200)", {}, 0.8585858345031738, 0.8181086778640747},
    {"PR", {.curve = "PR"}, 0.8476511240005493, 0.7377128601074219},
    {"ROC, 7 thresholds", {.num_thresholds = 7}, 0.7979797720909119, 0.7682092189788818},
    {"PR, 7", {.num_thresholds = 7, .curve = "PR"}, 0.759662926197052, 0.6510980129241943},
    {"ROC, 7, minoring",
     {.num_thresholds = 7, .summation_method = "minoring"},
     0.7272727489471436,
     0.6893360018730164},
    {"PR, 7, majoring",
     {.num_thresholds = 7, .curve = "PR", .summation_method = "majoring"},
     0.8387464880943298,
     0.7256057262420654},
    {"multi_label", {.multi_label = true}, 0.8583333492279053, 0.8272130489349365},
    {"multi_label PR",
     {.curve = "PR", .multi_label = true},
     0.8583569526672363,
     0.7656688690185547},
    {"thresholds", {.thresholds = {0.5, 0.3, 0.7}}, 0.808080792427063, 0.7577465176582336},
};

Model identity(const metrics::AUCOptions& o) {
  reset_layer_names();
  Model m = Sequential({layers::Input({2}), layers::Activation("linear")});
  m.compile({.loss = losses::BinaryCrossentropy(),
             .metric_objects = {metrics::AUC(o, "auc")},
             .weighted_metric_objects = {metrics::AUC(o, "weighted_auc")}});
  return m;
}

void check_cases(const ds::Strategy* strategy) {
  Tensor x = Tensor::from_vector(Shape{10, 2}, kScores);
  Tensor y = Tensor::from_vector(Shape{10, 2}, kLabels);
  Tensor w = Tensor::from_vector(Shape{10}, kWeights);
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.what);
    Model m = [&] {
      if (!strategy) return identity(c.options);
      auto scope = strategy->scope();
      return identity(c.options);
    }();
    Logs logs = m.evaluate(x, y, {.batch_size = 4, .verbose = 0, .sample_weight = w});
    EXPECT_NEAR(logs.at("auc"), c.plain, 2e-6);
    EXPECT_NEAR(logs.at("weighted_auc"), c.weighted, 2e-6);
  }
}

}  // namespace

TEST(AUC, MatchesKerasOnOneDevice) { check_cases(nullptr); }

TEST(AUC, MatchesKerasUnderTwoReplicas) {
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  check_cases(&strategy);
}

TEST(AUC, FromLogitsAndTheStringName) {
  // keras.metrics.AUC(from_logits=True) on log(p / (1 - p)) gives the default's 0.8585858...
  std::vector<float> logits;
  for (float p : kScores) logits.push_back(std::log(p / (1 - p)));
  reset_layer_names();
  Model m = Sequential({layers::Input({2}), layers::Activation("linear")});
  m.compile({.loss = losses::BinaryCrossentropy({.from_logits = true}),
             .metrics = {"auc"},
             .metric_objects = {metrics::AUC({.from_logits = true}, "logit_auc")}});
  Logs logs = m.evaluate(Tensor::from_vector(Shape{10, 2}, logits),
                         Tensor::from_vector(Shape{10, 2}, kLabels), {.verbose = 0});
  EXPECT_NEAR(logs.at("logit_auc"), 0.8585858345031738, 2e-6);
  // The string takes the logits as probabilities (Keras: AUC() on the logits, 0.76767677).
  EXPECT_NEAR(logs.at("auc"), 0.7676767706871033, 2e-6);
}

TEST(AUC, ClearErrors) {
  EXPECT_THROW(metrics::AUC({.curve = "PRGAIN2"}), Error);
  EXPECT_THROW(metrics::AUC({.num_thresholds = 1}), Error);
  EXPECT_THROW(metrics::AUC({.summation_method = "middle"}), Error);
}

TEST(AUC, UnevenThresholdsDoNotClip) {
  // keras.metrics.AUC(thresholds=[0.2, 0.5, 0.9]) on y = [1, 0, 1], p = [1.5, -0.3, 0.6]
  // (Keras's general path compares without clipping): TP/FP at (-1e-7, 0.2, 0.5, 0.9, 1+1e-7)
  // = 2/0, 2/0, 2/0, 1/0, 1/0; TN 1 each -> FPR 0 everywhere, so the ROC area is 0. Keras
  // 3.15.1 prints 0.0 for this and 1.0 for AUC(num_thresholds=3) below.
  reset_layer_names();
  Model m = Sequential({layers::Input({1}), layers::Activation("linear")});
  m.compile({.loss = losses::BinaryCrossentropy(),
             .metric_objects = {metrics::AUC({.thresholds = {0.2, 0.5, 0.9}}),
                                metrics::AUC({.num_thresholds = 3}, "even_auc")}});
  Logs logs = m.evaluate(Tensor::from_vector(Shape{3, 1}, {1.5f, -0.3f, 0.6f}),
                         Tensor::from_vector(Shape{3, 1}, {1, 0, 1}), {.verbose = 0});
  EXPECT_NEAR(logs.at("auc"), 0.0, 1e-7);
  // Thresholds (-1e-7, 0.5, 1+1e-7), clipped p = (1, 0, 0.6): TP 2, 2, 0; FP 1, 0, 0;
  // FPR 1, 0, 0; TPR 1, 1, 0 -> area (1 - 0) * (1 + 1) / 2 = 1.
  EXPECT_NEAR(logs.at("even_auc"), 1.0, 1e-7);
}
