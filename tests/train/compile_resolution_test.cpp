// compile()'s resolution as a pure function (src/trainers/compile_resolution.h): a CompileConfig
// and a model's output names in, each output's loss, loss weight and metrics with their log
// names out; the list and dict forms of the per-output arguments (PerOutput) give the same
// result, and every error names the argument, the model and its outputs.
#include "trainers/compile_resolution.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using test_util::error_of;

namespace {

const std::vector<std::string> kTwo{"reg", "cls"};

LossPtr sparse() { return losses::SparseCategoricalCrossentropy({.from_logits = true}); }

// The error resolve_compile throws for `c` on the two-output model "m" ("" for none).
std::string resolve_error(const CompileConfig& c, const std::vector<std::string>& outputs = kTwo) {
  return error_of([&] { resolve_compile(c, "m", outputs); });
}

void expect_has(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

}  // namespace

TEST(CompileResolution, SingleOutputLossAndMetricNames) {
  const LossPtr loss = sparse();
  const ResolvedCompile r = resolve_compile({.optimizer = optimizers::SGD(0.1),
                                             .loss = loss,
                                             .metrics = {"accuracy"},
                                             .weighted_metrics = {"accuracy"}},
                                            "m", {"dense"});
  ASSERT_EQ(r.output_losses.size(), 1u);
  EXPECT_EQ(r.output_losses[0], loss);
  EXPECT_EQ(r.loss_weights, (std::vector<double>{1.0}));
  EXPECT_TRUE(r.output_loss_trackers.empty());
  ASSERT_EQ(r.metrics.size(), 1u);
  ASSERT_EQ(r.weighted_metrics.size(), 1u);
  EXPECT_NE(r.metrics[0], r.weighted_metrics[0]);  // two accumulators
  EXPECT_EQ(r.metric_outputs, (std::vector<int>{0}));
  // Keras logs a weighted metric whose name a plain one has as "weighted_<name>".
  EXPECT_EQ(r.metric_log_names,
            (std::vector<std::string>{"loss", "accuracy", "weighted_accuracy"}));
  EXPECT_EQ(r.all_metrics().size(), 3u);
  EXPECT_EQ(r.all_metrics()[0], r.loss_tracker);
}

TEST(CompileResolution, ListFormGivesEachOutputItsLossWeightAndMetrics) {
  const LossPtr mse = losses::get("mse"), sce = sparse();
  const ResolvedCompile r = resolve_compile({.losses = {mse, sce},
                                             .loss_weights = {0.5, 2.0},
                                             .output_metrics = {{"mae"}, {"accuracy"}},
                                             .output_weighted_metrics = {{}, {"accuracy"}}},
                                            "m", kTwo);
  EXPECT_EQ(r.output_losses, (std::vector<LossPtr>{mse, sce}));
  EXPECT_EQ(r.loss_weights, (std::vector<double>{0.5, 2.0}));
  ASSERT_EQ(r.output_loss_trackers.size(), 2u);
  EXPECT_EQ(r.metric_outputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.weighted_metric_outputs, (std::vector<int>{1}));
  EXPECT_EQ(r.metric_log_names,
            (std::vector<std::string>{"loss", "reg_loss", "cls_loss", "reg_mae", "cls_accuracy",
                                      "cls_weighted_accuracy"}));
}

TEST(CompileResolution, DictFormEqualsTheListForm) {
  const LossPtr mse = losses::get("mse"), sce = sparse();
  CompileConfig dict{.losses = {{"cls", sce}, {"reg", mse}},
                     .loss_weights = {{"cls", 2.0}},
                     .output_metrics = PerOutput<std::vector<std::string>>::by_name(
                         {{"cls", {"accuracy"}}, {"reg", {"mae", "mse"}}})};
  EXPECT_TRUE(dict.losses.keyed());
  const ResolvedCompile r = resolve_compile(dict, "m", kTwo);
  EXPECT_EQ(r.output_losses, (std::vector<LossPtr>{mse, sce}));  // in the output order
  EXPECT_EQ(r.loss_weights, (std::vector<double>{1.0, 2.0}));    // "reg" left out: 1
  // The resolved configuration holds the list forms, which resolve again to the same.
  EXPECT_EQ(r.config.losses, (std::vector<LossPtr>{mse, sce}));
  EXPECT_EQ(r.config.loss_weights, (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(r.config.output_metrics,
            (std::vector<std::vector<std::string>>{{"mae", "mse"}, {"accuracy"}}));
  EXPECT_EQ(r.metric_log_names, (std::vector<std::string>{"loss", "reg_loss", "cls_loss", "reg_mae",
                                                          "reg_mse", "cls_accuracy"}));
  const ResolvedCompile again = resolve_compile(r.config, "m", kTwo);
  EXPECT_EQ(again.metric_log_names, r.metric_log_names);
  EXPECT_EQ(again.loss_weights, r.loss_weights);
  // Pure: the argument keeps its dict form.
  EXPECT_TRUE(dict.losses.keyed());
  EXPECT_EQ(dict.loss_weights.dict(), (std::map<std::string, double>{{"cls", 2.0}}));
}

TEST(CompileResolution, PerOutputHoldsOneFormAtATime) {
  PerOutput<double> w = {1.0, 2.0};
  EXPECT_FALSE(w.keyed());
  EXPECT_EQ(w, (std::vector<double>{1.0, 2.0}));
  EXPECT_NE(error_of([&] { w["reg"] = 3.0; }).find("holds a list of 2 entries"), std::string::npos);
  w = {{"reg", 3.0}};
  EXPECT_TRUE(w.keyed());
  w["cls"] = 0.5;
  EXPECT_EQ(w.size(), 2u);
  EXPECT_FALSE(w == (std::vector<double>{3.0, 0.5}));  // a dict is no list
  EXPECT_EQ(w.erase("reg"), 1u);
  EXPECT_EQ(w.dict(), (std::map<std::string, double>{{"cls", 0.5}}));
  PerOutput<double> fresh;
  fresh["cls"] = 1.0;  // an empty one becomes the dict form
  EXPECT_TRUE(fresh.keyed());
}

TEST(CompileResolution, ErrorsNameTheArgumentTheModelAndItsOutputs) {
  const LossPtr mse = losses::get("mse");
  expect_has(resolve_error({.losses = {{"reg", mse}}}),
             "compile: losses has no entry for output 'cls' of model 'm' (outputs: reg, cls; "
             "every output needs one)");
  expect_has(resolve_error({.loss = mse, .loss_weights = {{"regg", 1.0}}}),
             "compile: loss_weights has key 'regg', which is not an output of model 'm' "
             "(outputs: reg, cls)");
  expect_has(resolve_error({.loss = mse, .output_metrics = {{"mae"}}}),
             "compile: output_metrics has 1 entries but model 'm' has 2 outputs (reg, cls); "
             "pass one per output");
  expect_has(resolve_error({.loss = mse, .losses = {mse, mse}}),
             "pass `loss` (one loss for every output) or `losses` (one per output), not both");
  expect_has(resolve_error({.loss = mse, .metrics = {"mae"}}),
             "compile: model 'm' has 2 outputs (reg, cls): give each output its metrics with "
             "output_metrics");
  expect_has(
      resolve_error({.loss = mse, .loss_weights = {1.0, std::numeric_limits<double>::infinity()}}),
      "compile: loss_weights[1] is inf (must be finite)");
  expect_has(resolve_error({.losses = {mse, nullptr}}),
             "compile: losses[1] (output 'cls') is null; every output needs a loss");
  expect_has(resolve_error({.loss = mse, .steps_per_execution = 0}),
             "compile: steps_per_execution must be >= 1, got 0");
  expect_has(resolve_error({.loss = mse, .backend = "tpu"}), "compile: unknown backend 'tpu'");
  const MetricPtr acc = metrics::get("accuracy", "");
  expect_has(resolve_error({.loss = mse, .metric_objects = {acc}, .weighted_metric_objects = {acc}},
                           {"dense"}),
             "compile: metric 'accuracy' is in both metric_objects and weighted_metric_objects");
  // ... and a good configuration resolves without one.
  EXPECT_EQ(resolve_error({.loss = mse, .loss_weights = {{"cls", 2.0}}}), "");
}
