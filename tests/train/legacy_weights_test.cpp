// Pretrained weight files (issue 23): Keras 2's legacy .h5 layout, which the published
// keras.applications weights use (layer groups listed in `layer_names`, datasets in
// `weight_names`), read by layer name as Keras's by_name=True (a new head keeps its weights)
// or in order; Keras 2 names ("conv/kernel:0") in any order within a group; a missing, extra
// or wrong-shape weight is an error naming the file, the layer and both shapes, and nothing
// changes, unless skip_mismatch, which leaves just that layer as it was. Keras 3's .weights.h5
// takes skip_mismatch too; long layer lists go in attribute chunks. Real Keras files:
// tests/interop/keras_weights_interop_test.cpp.
#include <gtest/gtest.h>

#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
using test_util::error_of;
using test_util::max_abs_diff;

namespace {

std::string tmp(const std::string& name) {
  return (test_util::temp_dir("legacy_weights") / name).string();
}

void randomize(Network& m, uint64_t seed) {
  for (auto& w : m.weights()) {
    Tensor t = test_util::lcg_inputs(w->value.shape(), seed++);
    if (w->name.find("variance") != std::string::npos)
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] += 1.5f;
    w->value.copy_from(t);
  }
}

// A published backbone's shape, with Keras-application-style names; `head`: a new classifier.
Model backbone(uint64_t seed, bool head, int64_t filters = 4, bool bias = true,
               int64_t top_filters = 3) {
  reset_layer_names();
  set_random_seed(seed);
  std::vector<SequentialItem> items{
      Input({6, 6, 2}),
      Conv2D(filters, 3, {.padding = "same", .use_bias = bias, .name = "block1_conv"}),
      BatchNormalization({.name = "block1_bn"}),
      ReLU(),
      Conv2D(top_filters, 1, {.name = "block2_conv"}),
      GlobalAveragePooling2D(false, "avg_pool")};
  if (head) items.push_back(Dense(2, {.name = "predictions"}));
  return Sequential(items, "backbone");
}

bool same(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  return max_abs_diff(a, b) == 0.0f;
}

}  // namespace

TEST(LegacyWeights, SaveWeightsDotH5WritesKerasTwosLayoutAndLoadsBack) {
  Model a = backbone(1, true);
  randomize(a, 10);
  const std::string path = tmp("whole.h5");
  a.save_weights(path);
  ASSERT_TRUE(io::is_legacy_h5(path));
  io::LegacyWeightsFile f = io::read_legacy_h5(path);
  ASSERT_EQ(f.layers.size(), 6u);  // model.layers: no InputLayer in a Sequential
  EXPECT_EQ(f.layers[0].layer, "block1_conv");
  EXPECT_EQ(f.layers[0].weights[0].name, "block1_conv/kernel");
  EXPECT_EQ(f.layers[1].weights.size(), 4u);  // gamma, beta, moving mean and variance
  EXPECT_TRUE(f.layers[2].weights.empty());   // ReLU
  EXPECT_EQ(f.keras_version, "3.15.1");
  Model b = backbone(2, true);
  LoadWeightsReport r = b.load_weights(path);
  EXPECT_EQ(r.loaded.size(), 4u);
  EXPECT_TRUE(r.not_in_file.empty());
  EXPECT_TRUE(same(a.get_weights(), b.get_weights()));
  // In order (Keras 3's default for .h5), whatever the names.
  Model c = backbone(3, true);
  c.get_layer("block1_conv")->set_name("renamed");
  c.load_weights(path, {.by_name = false});
  EXPECT_TRUE(same(a.get_weights(), c.get_weights()));
}

TEST(LegacyWeights, ByNameLoadsAPretrainedBackboneUnderANewHead) {
  Model published = backbone(1, /*head=*/false);  // an include_top=False weights file
  randomize(published, 20);
  const std::string path = tmp("no_top.h5");
  published.save_weights(path);
  Model m = backbone(4, /*head=*/true);
  const Tensor head_before = m.get_layer("predictions")->weights()[0]->value.clone();
  LoadWeightsReport r = m.load_weights(path);
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"block1_conv", "block1_bn", "block2_conv"}));
  EXPECT_EQ(r.not_in_file, std::vector<std::string>{"predictions"});
  auto want = published.get_weights(), got = m.get_weights();
  got.resize(want.size());
  EXPECT_TRUE(same(want, got));
  EXPECT_EQ(max_abs_diff(head_before, m.get_layer("predictions")->weights()[0]->value), 0.0f);
  // In order, the head is one layer too many: an error that says to load by name.
  std::string e = error_of([&] { m.load_weights(path, {.by_name = false}); });
  EXPECT_NE(e.find("4 layers with weights but the file has 3"), std::string::npos) << e;
  EXPECT_NE(e.find("by_name"), std::string::npos) << e;
}

TEST(LegacyWeights, KerasTwoNamesInAnyOrderMatchByName) {
  Model a = backbone(1, false);
  randomize(a, 30);
  io::LegacyWeightsFile f{{}, "2.15.0", "tensorflow"};
  for (auto& l : keras_layer_order(a)) {
    io::LegacyLayerWeights g{l->name(), {}};
    auto w = l->weights();
    for (auto it = w.rbegin(); it != w.rend(); ++it)  // reversed: bias before kernel
      g.weights.push_back({(*it)->name + ":0", (*it)->value});
    f.layers.push_back(g);
  }
  f.layers.push_back({"dropped_top", {{"dropped_top/kernel:0", Tensor::zeros(Shape{3, 9})}}});
  const std::string path = tmp("keras2.h5");
  io::write_legacy_h5(path, f);
  Model b = backbone(5, false);
  LoadWeightsReport r = b.load_weights(path);
  EXPECT_EQ(r.loaded.size(), 3u);  // dropped_top: not in the model, ignored as Keras does
  EXPECT_TRUE(same(a.get_weights(), b.get_weights()));
}

TEST(LegacyWeights, MismatchesNameTheLayerAndBothShapesUnlessSkipped) {
  Model a = backbone(1, false);
  randomize(a, 40);
  const std::string path = tmp("four_filters.h5");
  a.save_weights(path);
  Model wide = backbone(6, false, 4, true, /*top_filters=*/5);
  const auto before = wide.get_weights();
  std::string e = error_of([&] { wide.load_weights(path); });
  for (const char* want : {"four_filters.h5", "Conv2D 'block2_conv'", "block2_conv/kernel",
                           "(1, 1, 4, 5)", "(1, 1, 4, 3)", "skip_mismatch"})
    EXPECT_NE(e.find(want), std::string::npos) << want << " in: " << e;
  EXPECT_TRUE(same(before, wide.get_weights())) << "a failed load changes nothing";
  // skip_mismatch: the mismatching layer stays as it was, the others load.
  LoadWeightsReport r = wide.load_weights(path, {.skip_mismatch = true});
  EXPECT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.loaded, (std::vector<std::string>{"block1_conv", "block1_bn"}));
  EXPECT_EQ(max_abs_diff(wide.get_layer("block2_conv")->weights()[0]->value, before[6]), 0.0f);
  EXPECT_EQ(max_abs_diff(wide.get_layer("block1_conv")->weights()[0]->value,
                         a.get_layer("block1_conv")->weights()[0]->value),
            0.0f);
  // A missing weight (no bias here, one in the file): both counts and shapes in the message.
  Model no_bias = backbone(7, false, 4, /*bias=*/false);
  e = error_of([&] { no_bias.load_weights(path); });
  for (const char* want : {"Conv2D 'block1_conv' has 1 weight(s)", "holds 2", "bias (4,)"})
    EXPECT_NE(e.find(want), std::string::npos) << want << " in: " << e;
}

TEST(LegacyWeights, NoLayerNameInCommonIsAnErrorListingBoth) {
  Model a = backbone(1, false);
  const std::string path = tmp("names.h5");
  a.save_weights(path);
  reset_layer_names();
  Model other = Sequential({Input({6, 6, 2}), Conv2D(4, 3), GlobalAveragePooling2D()});
  std::string e = error_of([&] { other.load_weights(path, {.skip_mismatch = true}); });
  for (const char* want : {"no layer", "block1_conv", "conv2d"})
    EXPECT_NE(e.find(want), std::string::npos) << want << " in: " << e;
}

TEST(LegacyWeights, NestedBackboneLoadsAsOneLayerGroup) {
  Model base = backbone(1, false);
  randomize(base, 50);
  KTensor x = Input({6, 6, 2});
  Model outer(x, Dense(2, {.name = "head"})(base(x)), "outer");
  const std::string path = tmp("nested.h5");
  outer.save_weights(path);
  io::LegacyWeightsFile f = io::read_legacy_h5(path);
  ASSERT_EQ(f.layers.size(), 3u);  // input, backbone, head
  EXPECT_EQ(f.layers[1].layer, "backbone");
  EXPECT_EQ(f.layers[1].weights.size(), base.weights().size());
  Model base2 = backbone(8, false);
  KTensor x2 = Input({6, 6, 2});
  Model outer2(x2, Dense(2, {.name = "head"})(base2(x2)), "outer");
  base2.as_layer()->trainable = false;  // frozen: its legacy order is its weights' order
  outer2.load_weights(path);
  EXPECT_TRUE(same(outer.get_weights(), outer2.get_weights()));
}

TEST(LegacyWeights, KerasThreeWeightsFileTakesSkipMismatch) {
  Model a = backbone(1, true);
  randomize(a, 60);
  const std::string path = tmp("k3.weights.h5");
  a.save_weights(path);
  EXPECT_FALSE(io::is_legacy_h5(path));
  Model wide = backbone(9, true, 4, true, /*top_filters=*/5);
  std::string e = error_of([&] { wide.load_weights(path); });
  EXPECT_NE(e.find("(1, 1, 4, 5)"), std::string::npos) << e;
  EXPECT_NE(e.find("skip_mismatch"), std::string::npos) << e;
  LoadWeightsReport r = wide.load_weights(path, {.skip_mismatch = true});
  EXPECT_EQ(r.skipped.size(), 2u);  // block2_conv and the head after it
  EXPECT_EQ(max_abs_diff(wide.get_layer("block1_conv")->weights()[0]->value,
                         a.get_layer("block1_conv")->weights()[0]->value),
            0.0f);
}

TEST(LegacyWeights, LongLayerListsAreSplitIntoAttributeChunksAsKerasDoes) {
  // 40 names of 1,700 bytes: over HDF5's 64 KB object-header limit in one attribute, so the
  // writer splits layer_names into layer_names0, layer_names1 (Keras's rule) and the reader
  // joins them.
  reset_layer_names();
  std::vector<SequentialItem> items{Input({2})};
  for (int i = 0; i < 40; ++i)
    items.push_back(Dense(2, {.name = std::string(1700, 'a' + i % 26) + std::to_string(i)}));
  Model a = Sequential(items, "long_names");
  randomize(a, 70);
  const std::string path = tmp("long_names.h5");
  a.save_weights(path);
  ASSERT_TRUE(io::is_legacy_h5(path));
  EXPECT_EQ(io::read_legacy_h5(path).layers.size(), 40u);
  const auto saved = a.get_weights();
  for (auto& w : a.weights()) w->value.copy_from(Tensor::zeros(w->value.shape()));
  EXPECT_EQ(a.load_weights(path).loaded.size(), 40u);
  EXPECT_TRUE(same(saved, a.get_weights()));
}
