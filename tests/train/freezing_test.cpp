// Freezing and fine-tuning with Keras's semantics (issue 23): a frozen layer or nested model
// keeps its weights bit for bit through fit, BatchNormalization's moving statistics included
// (a frozen BN normalises with them, in inference mode), while the head trains; its backward is
// not even built; unfreezing the top layers and compiling again keeps every weight and trains
// only the unfrozen ones; summary() and the Keras config carry the split; under a
// MirroredStrategy frozen weights stay put and are not averaged.
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>

#include "lockstep/distribute/strategy.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
using test_util::max_abs_diff;

namespace {

// Bit for bit: the same bytes, not merely close values.
bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// A backbone of two conv blocks with BatchNormalization, nested in a model with a new head: the
// transfer-learning shape. The moving statistics start away from (0, 1) so that inference-mode
// and training-mode normalisation give different outputs.
struct Transfer {
  Model base, model;
  LayerPtr conv1, bn1, conv2, bn2, head;
};

Transfer transfer_model() {
  reset_layer_names();
  set_random_seed(7);
  Transfer t;
  t.conv1 = Conv2D(4, 3, {.padding = "same"});
  t.bn1 = BatchNormalization();
  t.conv2 = Conv2D(6, 3);
  t.bn2 = BatchNormalization();
  t.base = Sequential(
      {Input({8, 8, 2}), t.conv1, t.bn1, ReLU(), t.conv2, t.bn2, ReLU(), GlobalAveragePooling2D()},
      "backbone");
  for (const LayerPtr& bn : {t.bn1, t.bn2}) {
    bn->weights()[2]->value.copy_from(test_util::lcg_inputs(bn->weights()[2]->value.shape(), 3));
    Tensor var = test_util::lcg_inputs(bn->weights()[3]->value.shape(), 4);
    for (int64_t i = 0; i < var.numel(); ++i) var.data<float>()[i] = 1.5f + var.data<float>()[i];
    bn->weights()[3]->value.copy_from(var);
  }
  KTensor x = Input({8, 8, 2}, "image");
  t.head = Dense(3);
  t.model = Model(x, (*t.head)(t.base(x)), "transfer");
  return t;
}

void compile(Model& m, double lr = 0.02) {
  m.compile({.optimizer = optimizers::Adam(lr),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
}

const FitConfig kFit{.batch_size = 8, .epochs = 2, .verbose = 0};

}  // namespace

TEST(Freezing, FrozenNestedBaseKeepsWeightsAndStatisticsBitForBitWhileTheHeadTrains) {
  Transfer t = transfer_model();
  t.base.as_layer()->trainable = false;               // keras: base_model.trainable = False
  EXPECT_EQ(t.model.trainable_weights().size(), 2u);  // the head's kernel and bias
  EXPECT_EQ(t.model.non_trainable_weights().size(), t.base.weights().size());
  const auto base_before = t.base.get_weights();
  const auto head_before = t.head->weights()[0]->value.clone();
  compile(t.model);
  auto [x, y] = test_util::quadrant_images(48, 1);
  t.model.fit(x, y, kFit);
  const auto base_after = t.base.get_weights();
  ASSERT_EQ(base_before.size(), 12u);  // 2 x (kernel, bias) + 2 x (gamma, beta, mean, variance)
  for (size_t i = 0; i < base_before.size(); ++i)
    EXPECT_TRUE(same_bits(base_before[i], base_after[i])) << t.base.weights()[i]->name;
  EXPECT_GT(max_abs_diff(head_before, t.head->weights()[0]->value), 1e-3f);
}

TEST(Freezing, FrozenLayersOfAFlatModelKeepTheirWeightsAndStatistics) {
  reset_layer_names();
  LayerHandle conv = Conv2D(3, 3), bn = BatchNormalization(), dense = Dense(3);
  Model m = Sequential({Input({8, 8, 2}), conv, bn, Flatten(), dense});
  conv->trainable = false;
  bn->trainable = false;
  bn->weights()[3]->value.copy_from(Tensor::full(Shape{3}, 2.0f));
  auto before = m.get_weights();
  compile(m);
  auto [x, y] = test_util::quadrant_images(32, 2);
  m.fit(x, y, kFit);
  auto after = m.get_weights();
  for (size_t i = 0; i < 6; ++i) EXPECT_TRUE(same_bits(before[i], after[i])) << i;
  EXPECT_GT(max_abs_diff(before[6], after[6]), 1e-3f);  // dense kernel
  // A trainable BatchNormalization does move its statistics (the check above can fail).
  bn->trainable = true;
  compile(m);
  m.fit(x, y, kFit);
  EXPECT_GT(max_abs_diff(after[4], bn->weights()[2]->value), 1e-4f);
}

TEST(Freezing, BackwardIsNotBuiltForLayersInFrontOfTheFirstTrainedWeight) {
  auto grad_nodes_of = [](Transfer& t, const std::string& layer) {
    Graph g;
    CallContext ctx{g, true, 1};
    Value x = g.input({DType::f32, Shape{2, 8, 8, 2}}, "x");
    Value out = t.model.call(ctx, {x})[0];
    Value loss = g.add(op::reduce_sum, {out},
                       Attrs{{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", false}});
    std::vector<Value> reads;
    for (auto& v : t.model.trainable_weights()) reads.push_back(g.variable(v));
    gradients(g, loss, reads);
    int n = 0;
    for (int i = 0; i < g.size(); ++i) n += g.node(i).name.rfind(layer + "/grad", 0) == 0;
    return n;
  };
  Transfer t = transfer_model();
  EXPECT_GT(grad_nodes_of(t, t.conv1->name()), 0);  // all trainable: conv1's backward is built
  t.base.as_layer()->trainable = false;
  EXPECT_EQ(grad_nodes_of(t, t.conv1->name()), 0);
  EXPECT_EQ(grad_nodes_of(t, t.bn2->name()), 0);
  EXPECT_GT(grad_nodes_of(t, t.head->name()), 0);
  // Fine-tuning the top block: its backward is built, the bottom block's still is not.
  t.base.as_layer()->trainable = true;
  t.conv1->trainable = t.bn1->trainable = false;
  EXPECT_GT(grad_nodes_of(t, t.conv2->name()), 0);
  EXPECT_EQ(grad_nodes_of(t, t.conv1->name()), 0);
}

TEST(Freezing, UnfreezingTheTopLayersAndRecompilingKeepsWeightsAndTrainsOnlyThose) {
  Transfer t = transfer_model();
  t.base.as_layer()->trainable = false;
  compile(t.model);
  auto [x, y] = test_util::quadrant_images(48, 3);
  t.model.fit(x, y, kFit);
  const Tensor pred = t.model.predict(x);
  // Fine-tune: the whole base trainable again, then its bottom block (and both BNs, as Keras's
  // guide advises) frozen; compile again with a fresh, slower optimizer.
  t.base.as_layer()->trainable = true;
  for (const LayerPtr& l : {t.conv1, t.bn1, t.bn2}) l->trainable = false;
  compile(t.model, 1e-3);
  EXPECT_EQ(t.model.compile_config().optimizer->iterations()->value.item(), 0.0f);
  EXPECT_TRUE(same_bits(t.model.predict(x), pred)) << "compile() must keep the weights";
  EXPECT_EQ(t.model.trainable_weights().size(), 4u);  // conv2 kernel, bias; head kernel, bias
  const auto before = t.model.get_weights();
  t.model.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
  const auto after = t.model.get_weights();
  const auto weights = t.model.weights();
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::string& n = weights[i]->name;
    const bool trained =
        n.rfind(t.conv2->name() + "/", 0) == 0 || n.rfind(t.head->name() + "/", 0) == 0;
    if (trained)
      EXPECT_GT(max_abs_diff(before[i], after[i]), 0.0f) << n;
    else
      EXPECT_TRUE(same_bits(before[i], after[i])) << n;
  }
}

TEST(Freezing, SetTrainableFreezesEveryLayerLikeKerasModelTrainable) {
  Transfer t = transfer_model();
  t.base.set_trainable(false);
  EXPECT_FALSE(t.base.as_layer()->trainable);
  for (auto& l : t.base.layers()) EXPECT_FALSE(l->trainable) << l->name();
  EXPECT_EQ(t.model.trainable_weights().size(), 2u);
  t.base.set_trainable(true);
  EXPECT_EQ(t.model.trainable_weights().size(), 2u + 4u + 4u);    // convs, BN gammas and betas
  EXPECT_EQ(t.model.updated_non_trainable_weights().size(), 4u);  // the moving statistics
}

TEST(Freezing, SummaryCountsTrainableAndNonTrainableParams) {
  Transfer t = transfer_model();
  t.base.as_layer()->trainable = false;
  std::ostringstream os;
  t.model.summary(os);
  const std::string s = os.str();
  // base: conv1 2*9*4+4 = 76, bn1 16, conv2 4*9*6+6 = 222, bn2 24; head 6*3+3 = 21.
  EXPECT_NE(s.find("Total params: 359 "), std::string::npos) << s;
  EXPECT_NE(s.find("Trainable params: 21 "), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 338 "), std::string::npos) << s;
}

TEST(Freezing, TrainableRoundTripsThroughConfigAndKerasFiles) {
  Transfer t = transfer_model();
  t.conv1->trainable = false;
  t.head->trainable = false;
  json cfg = t.model.get_config();
  Model back = model_from_config(cfg);
  EXPECT_EQ(back.get_config(), cfg);
  auto nested = nested_network(*back.get_layer("backbone"));
  ASSERT_TRUE(nested);
  EXPECT_FALSE(nested->get_layer(t.conv1->name())->trainable);
  EXPECT_TRUE(nested->get_layer(t.conv2->name())->trainable);
  EXPECT_FALSE(back.get_layer(t.head->name())->trainable);
  // A frozen nested model, through a compiled .keras file (optimizer slots only for the
  // trained weights, as Keras builds its optimizer on model.trainable_variables).
  Transfer f = transfer_model();
  f.base.as_layer()->trainable = false;
  compile(f.model);
  auto [x, y] = test_util::quadrant_images(16, 4);
  f.model.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
  const std::string path = (test_util::temp_dir("freezing") / "frozen.keras").string();
  f.model.save(path);
  Model loaded = load_model(path);
  EXPECT_FALSE(loaded.get_layer("backbone")->trainable);
  EXPECT_EQ(loaded.trainable_weights().size(), 2u);
  EXPECT_TRUE(same_bits(loaded.predict(x), f.model.predict(x)));
}

TEST(Freezing, MirroredStrategyLeavesFrozenWeightsAloneAndMatchesOneReplica) {
  auto [x, y] = test_util::quadrant_images(32, 5);
  Transfer single = transfer_model();
  single.base.as_layer()->trainable = false;
  compile(single.model);
  const auto base_before = single.base.get_weights();
  single.model.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  auto strategy = distribute::MirroredStrategy({"cpu:0", "cpu:1"});
  Transfer mirrored = transfer_model();
  mirrored.base.as_layer()->trainable = false;
  {
    auto scope = strategy.scope();
    compile(mirrored.model);
  }
  EXPECT_TRUE(mirrored.model.updated_non_trainable_weights().empty());  // nothing to average
  mirrored.model.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false});
  const auto base_after = mirrored.base.get_weights();
  for (size_t i = 0; i < base_before.size(); ++i)
    EXPECT_TRUE(same_bits(base_before[i], base_after[i])) << i;
  EXPECT_LT(max_abs_diff(single.model.get_weights(), mirrored.model.get_weights()), 2e-5f);
}
