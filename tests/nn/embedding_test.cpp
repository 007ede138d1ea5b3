// Embedding and Masking (issue 35): the lookup against the table, out-of-range ids (an error
// naming the layer, the id and the range), a mask reaching a layer that cannot take it, the
// loss and metrics weighted by the mask as Keras weights them, Masking's output and mask, the
// configs both ways, and mixed_bfloat16.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"
#include "lockstep/nn/mixed_precision.h"
#include "lockstep/trainers/model.h"
#include "test_util.h"

using namespace lockstep;
using lockstep::test_util::expect_has;
namespace L = lockstep::layers;

namespace {

// Ids [4, 5] with trailing padding (0): rows keep 5, 3, 1 and 4 steps.
Tensor padded_ids() {
  return Tensor::from_vector_i32({4, 5}, {3, 1, 4, 1, 5,  //
                                          2, 5, 1, 0, 0,  //
                                          4, 0, 0, 0, 0,  //
                                          5, 5, 2, 3, 0});
}

Tensor targets(const Shape& s) {
  std::vector<float> v(size_t(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.3f * float(int(i % 5) - 2) + 0.05f * float(i % 3);
  return Tensor::from_vector(s, v);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(EmbeddingLayer, LooksUpTheTableRowOfEachId) {
  for (const char* backend : {"reference", "cpu"}) {
    auto x = L::Input({5}, "ids", DType::i32);
    auto emb = L::Embedding(6, 3, {.name = "emb"});
    Model m(x, emb(x));
    m.compile(
        {.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse"), .backend = backend});
    Tensor y = m.predict(padded_ids(), 4);
    ASSERT_EQ(y.shape(), Shape({4, 5, 3}));
    const auto table = emb->weights().at(0)->value.to_vector();
    const auto ids = padded_ids().to_vector();
    const auto yv = y.to_vector();
    for (size_t i = 0; i < ids.size(); ++i)
      for (size_t d = 0; d < 3; ++d)
        EXPECT_EQ(yv[i * 3 + d], table[size_t(ids[i]) * 3 + d]) << backend << " " << i;
  }
}

TEST(EmbeddingLayer, FloatIdsAreTruncatedToInt32AsKerasCastsThem) {
  auto x = L::Input({2});
  auto emb = L::Embedding(4, 2);
  Model m(x, emb(x));
  Tensor y = m.predict(Tensor::from_vector({1, 2}, {3.7f, 1.2f}), 1);
  const auto table = emb->weights().at(0)->value.to_vector();
  EXPECT_EQ(y.to_vector()[0], table[6]);
  EXPECT_EQ(y.to_vector()[2], table[2]);
}

TEST(EmbeddingLayer, AnOutOfRangeIdIsAnErrorNamingTheLayerTheIdAndTheRange) {
  for (const char* backend : {"reference", "cpu"})
    for (int32_t bad : {6, -1}) {
      auto x = L::Input({3}, "ids", DType::i32);
      Model m(x, L::Dense(2)(L::Embedding(6, 3, {.name = "word_vectors"})(x)));
      m.compile(
          {.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse"), .backend = backend});
      Tensor ids = Tensor::from_vector_i32({2, 3}, {1, 2, 3, 4, bad, 0});
      const std::string err = error_of([&] { m.predict(ids, 2); });
      expect_has(err, {"'word_vectors'", "id " + std::to_string(bad), "[0, 6)"});
      const std::string fit_err = error_of([&] { m.fit(ids, targets({2, 3, 2}), {.verbose = 0}); });
      expect_has(fit_err, {"'word_vectors'", "id " + std::to_string(bad), "[0, 6)"});
    }
}

TEST(EmbeddingLayer, AMaskReachingFlattenIsRefusedNamingBothLayers) {
  auto x = L::Input({5}, "ids", DType::i32);
  auto h = L::Embedding(6, 3, {.mask_zero = true, .name = "emb"})(x);
  const std::string err = error_of([&] { L::Flatten("flat")(h); });
  expect_has(err, {"Flatten 'flat'", "Embedding 'emb'", "mask"});
  // Without mask_zero there is no mask, and Flatten takes the output.
  auto h2 = L::Embedding(6, 3)(x);
  EXPECT_EQ(error_of([&] { L::Flatten()(h2); }), "");
}

TEST(EmbeddingLayer, MaskPassesThroughDenseAndDropoutButNotAnEmbeddingWithoutMaskZero) {
  auto x = L::Input({5}, "ids", DType::i32);
  auto h = L::Embedding(6, 3, {.mask_zero = true})(x);
  EXPECT_TRUE(h.masked());
  auto d = L::Dropout(0.1)(L::Dense(4)(h));
  EXPECT_TRUE(d.masked());
  EXPECT_TRUE(KTensor(L::Add()({d, d})).masked());
  EXPECT_FALSE(L::Embedding(6, 3)(x).masked());
}

// Keras: loss = sum over the unmasked steps of the per-step loss / their number (apply_mask
// with "sum_over_batch_size"); metrics the mean over the unmasked steps.
TEST(EmbeddingLayer, TheLossAndMetricsWeightTheStepsByTheMask) {
  for (const char* backend : {"reference", "cpu"}) {
    auto x = L::Input({5}, "ids", DType::i32);
    Model m(x, L::Dense(2)(L::Embedding(6, 3, {.mask_zero = true})(x)));
    m.compile({.optimizer = optimizers::Adam(1e-3),
               .loss = losses::get("mse"),
               .metrics = {"mae"},
               .backend = backend});
    const Tensor ids = padded_ids(), y = targets({4, 5, 2});
    const auto p = m.predict(ids, 4).to_vector(), yv = y.to_vector(), iv = ids.to_vector();
    double se = 0, ae = 0;
    int kept = 0;
    for (size_t s = 0; s < 20; ++s) {
      if (iv[s] == 0) continue;
      ++kept;
      double sq = 0, ab = 0;
      for (size_t c = 0; c < 2; ++c) {
        const double d = p[s * 2 + c] - yv[s * 2 + c];
        sq += d * d, ab += std::fabs(d);
      }
      se += sq / 2, ae += ab / 2;
    }
    ASSERT_EQ(kept, 13);
    Logs logs = m.evaluate(ids, y, {.batch_size = 4, .verbose = 0});
    EXPECT_NEAR(logs.at("loss"), se / kept, 1e-5) << backend;
    const std::string mae = logs.count("mae") ? "mae" : "mean_absolute_error";
    ASSERT_TRUE(logs.count(mae)) << backend;
    EXPECT_NEAR(logs.at(mae), ae / kept, 1e-5) << backend;
    // Training moves the loss down over the unmasked steps (the masked ones do not count).
    m.compile(
        {.optimizer = optimizers::Adam(0.05), .loss = losses::get("mse"), .backend = backend});
    m.fit(ids, y, {.batch_size = 4, .epochs = 20, .verbose = 0});
    EXPECT_LT(m.evaluate(ids, y, {.batch_size = 4, .verbose = 0}).at("loss"), se / kept);
  }
}

TEST(MaskingLayer, ZeroesTheMaskedStepsAndMasksTheLoss) {
  auto x = L::Input({3, 2});
  auto h = L::Masking(0.0, "mask")(x);
  EXPECT_TRUE(h.masked());
  Model only(x, h);
  // Step 1 of row 0 and steps 0, 2 of row 1 are all zeros.
  Tensor xs = Tensor::from_vector({2, 3, 2}, {1, 2, 0, 0, 0, 3, 0, 0, 4, 0, 0, 0});
  EXPECT_EQ(only.predict(xs, 2).to_vector(), xs.to_vector());
  // mask_value 1: a step of all ones becomes zeros.
  auto x1 = L::Input({2, 2});
  Model ones(x1, L::Masking(1.0)(x1));
  EXPECT_EQ(ones.predict(Tensor::from_vector({1, 2, 2}, {1, 1, 1, 2}), 1).to_vector(),
            (std::vector<float>{0, 0, 1, 2}));
  // The loss of a Dense after it counts the 3 kept steps only.
  auto dense = L::Dense(1, {.bias_initializer = "constant:0.5"});
  Model m(x, dense(h));
  m.compile({.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse")});
  const Tensor y = targets({2, 3, 1});
  const auto p = m.predict(xs, 2).to_vector(), yv = y.to_vector();
  double se = 0;
  for (size_t s : {0, 2, 4}) se += (p[s] - yv[s]) * (p[s] - yv[s]);
  EXPECT_NEAR(m.evaluate(xs, y, {.batch_size = 2, .verbose = 0}).at("loss"), se / 3, 1e-5);
}

TEST(EmbeddingLayer, ConfigsRoundTripAsKerasWritesThem) {
  auto emb = L::Embedding(100, 8,
                          {.embeddings_regularizer_l2 = 0.01, .mask_zero = true, .name = "tokens"});
  const json c = emb->config();
  EXPECT_EQ(c.at("input_dim"), 100);
  EXPECT_EQ(c.at("output_dim"), 8);
  EXPECT_EQ(c.at("mask_zero"), true);
  EXPECT_EQ(c.at("embeddings_initializer").at("class_name"), "RandomUniform");
  LayerPtr back = layer_from_config({{"class_name", "Embedding"}, {"config", c}});
  EXPECT_EQ(back->config(), c);
  EXPECT_TRUE(back->supports_masking());
  auto mk = L::Masking(-1.0, "pad");
  LayerPtr mback = layer_from_config({{"class_name", "Masking"}, {"config", mk->config()}});
  EXPECT_EQ(mback->config(), mk->config());
  // A key Lockstep cannot honour is refused by name.
  json bad = c;
  bad["embeddings_constraint"] = {{"class_name", "NonNeg"}, {"config", json::object()}};
  expect_has(error_of([&] {
               layer_from_config({{"class_name", "Embedding"}, {"config", bad}});
             }),
             {"Embedding", "embeddings_constraint"});
}

TEST(EmbeddingLayer, MixedBfloat16ReadsTheTableInFloat32AndOutputsBfloat16) {
  mixed_precision::set_global_policy("mixed_bfloat16");
  auto x = L::Input({5}, "ids", DType::i32);
  auto emb = L::Embedding(6, 3);
  auto h = emb(x);
  mixed_precision::set_global_policy("float32");
  EXPECT_EQ(h.dtype(), DType::bf16);
  Model m(x, h);
  const auto y = m.predict(padded_ids(), 4).to_vector();
  const auto table = emb->weights().at(0)->value.to_vector();
  const auto ids = padded_ids().to_vector();
  for (size_t i = 0; i < ids.size(); ++i)
    EXPECT_EQ(y[i * 3], bf16_to_f32(f32_to_bf16(table[size_t(ids[i]) * 3])));
}
