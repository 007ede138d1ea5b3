// Keras preprocessing layers: identity at inference, layer output == dataset map function for
// the same key, reproducibility, crops/resizing, Normalization adapt, configs, and a model with
// augmentation layers that trains (autodiff works with them present).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "lockstep/data/augment.h"
#include "lockstep/data/dataset.h"
#include "lockstep/lockstep.h"
#include "ops/internal/kernel_math.h"
#include "test_util.h"

using namespace lockstep;
namespace L = lockstep::layers;

namespace {

Tensor images(Shape s, uint64_t seed, float lo = 0.f, float hi = 255.f) {
  Philox r(seed);
  std::vector<float> v(size_t(s.numel()));
  for (auto& e : v) e = r.uniform(lo, hi);
  return Tensor::from_vector(s, v);
}

struct LayerRun {
  Tensor y;
  uint64_t key = 0;  // the Philox key the layer's random op used (0 if none)
};

// Calls `l` on x in a fresh graph and runs it at `step` with model seed `seed`.
LayerRun run_layer(const LayerHandle& l, const Tensor& x, bool training, uint64_t step = 0,
                   uint64_t seed = 1337, const std::string& backend = "cpu") {
  l->ensure_built({x.shape().with_dim(0, -1)});
  Graph g;
  Value in = g.input({x.dtype(), x.shape()}, "x");
  CallContext ctx{g, training, seed, {}};
  Value out = l->call(ctx, {in})[0];
  Executable exe(g, {in}, {out}, {.backend = backend, .seed = seed});
  exe.input(0).copy_from(x);
  exe.set_step(step);
  exe.run();
  LayerRun r{exe.output(0).clone()};
  for (const Node& n : exe.graph().nodes())
    if (n.op.view().rfind("image_random_", 0) == 0) {
      StepInfo s{step, 0, seed};
      r.key = ew::dropout_key(n, &s);
    }
  return r;
}

using lockstep::test_util::error_of;

}  // namespace

TEST(Preprocessing, RandomLayersAreIdentityAtInference) {
  Tensor x = images({2, 6, 5, 3}, 1);
  std::vector<LayerHandle> ls = {L::RandomFlip(),        L::RandomRotation(0.3),
                                 L::RandomZoom(0.4),     L::RandomTranslation(0.2, 0.3),
                                 L::RandomContrast(0.5), L::RandomBrightness(0.4)};
  for (auto& l : ls) {
    LayerRun r = run_layer(l, x, false);
    EXPECT_EQ(r.y.to_vector(), x.to_vector()) << l->class_name();
    LayerRun t = run_layer(l, x, true);
    EXPECT_NE(t.y.to_vector(), x.to_vector()) << l->class_name() << " changed nothing in training";
  }
}

TEST(Preprocessing, LayerOutputEqualsTheMapFunctionForTheSameKey) {
  Tensor x = images({4, 7, 6, 3}, 2);
  const uint64_t step = 5;
  auto check = [&](LayerHandle l, std::function<Tensor(data::RandomKey)> map) {
    for (const char* backend : {"cpu", "reference"}) {
      LayerRun r = run_layer(l, x, true, step, 99, backend);
      ASSERT_NE(r.key, 0u) << l->class_name();
      EXPECT_EQ(r.y.to_vector(), map(data::RandomKey(r.key, step)).to_vector())
          << l->class_name() << " " << backend;
    }
  };
  check(L::RandomFlip("horizontal_and_vertical", 3),
        [&](data::RandomKey k) { return data::random_flip(x, k); });
  check(
      L::RandomRotation({-0.2, 0.3}, {.fill_mode = "constant", .fill_value = 7}),
      [&](data::RandomKey k) {
        return data::random_rotation(x, k, {-0.2, 0.3}, {.fill_mode = "constant", .fill_value = 7});
      });
  check(
      L::RandomZoom(0.3, L::Factor{-0.2, 0.1}, {.interpolation = "nearest"}),
      [&](data::RandomKey k) {
        return data::random_zoom(x, k, 0.3, data::Factor{-0.2, 0.1}, {.interpolation = "nearest"});
      });
  check(L::RandomZoom(0.3), [&](data::RandomKey k) { return data::random_zoom(x, k, 0.3); });
  check(L::RandomTranslation(0.2, {-0.1, 0.3}, {.fill_mode = "wrap"}), [&](data::RandomKey k) {
    return data::random_translation(x, k, 0.2, {-0.1, 0.3}, {.fill_mode = "wrap"});
  });
  check(L::RandomContrast(0.4),
        [&](data::RandomKey k) { return data::random_contrast(x, k, 0.4); });
  check(L::RandomBrightness({-0.2, 0.3}, {.value_range = {0, 1}}), [&](data::RandomKey k) {
    return data::random_brightness(x, k, {-0.2, 0.3}, {0.f, 1.f});
  });
  check(L::RandomCrop(4, 3), [&](data::RandomKey k) { return data::random_crop(x, k, 4, 3); });
}

TEST(Preprocessing, SameSeedAndStepReproduceOtherStepsDiffer) {
  Tensor x = images({3, 8, 8, 1}, 3);
  auto l = L::RandomRotation(0.2);
  EXPECT_EQ(run_layer(l, x, true, 4).y.to_vector(), run_layer(l, x, true, 4).y.to_vector());
  EXPECT_NE(run_layer(l, x, true, 4).y.to_vector(), run_layer(l, x, true, 5).y.to_vector());
  EXPECT_NE(run_layer(l, x, true, 4, 1).y.to_vector(), run_layer(l, x, true, 4, 2).y.to_vector());
  // An explicit layer seed changes the draws too.
  auto l2 = L::RandomRotation(0.2, {.seed = 77});
  EXPECT_NE(run_layer(l, x, true, 4).y.to_vector(), run_layer(l2, x, true, 4).y.to_vector());
}

TEST(Preprocessing, CropAndResizeLayers) {
  Tensor x = images({2, 6, 8, 3}, 4);
  // CenterCrop: the centred window, in training and inference.
  Tensor c = run_layer(L::CenterCrop(4, 4), x, false).y;
  ASSERT_EQ(c.shape(), Shape({2, 4, 4, 3}));
  EXPECT_EQ(c.to_vector(), data::center_crop(x, 4, 4).to_vector());
  // RandomCrop at inference: crop to the aspect ratio, then resize (6x8 -> 6x6 -> 3x3).
  Tensor ri = run_layer(L::RandomCrop(3, 3), x, false).y;
  ASSERT_EQ(ri.shape(), Shape({2, 3, 3, 3}));
  Tensor rs = run_layer(L::Resizing(3, 3, {.crop_to_aspect_ratio = true}), x, false).y;
  EXPECT_EQ(ri.to_vector(), rs.to_vector());
  // Resizing 2x down with bilinear half-pixel centres averages 2x2 blocks.
  Tensor r = run_layer(L::Resizing(3, 4), x, false).y;
  ASSERT_EQ(r.shape(), Shape({2, 3, 4, 3}));
  auto xv = x.to_vector(), rv = r.to_vector();
  auto px = [&](int i, int y, int xx, int ch) {
    return xv[size_t(((i * 6 + y) * 8 + xx) * 3 + ch)];
  };
  float want = (px(1, 2, 4, 2) + px(1, 2, 5, 2) + px(1, 3, 4, 2) + px(1, 3, 5, 2)) / 4;
  EXPECT_NEAR(rv[size_t(((1 * 3 + 1) * 4 + 2) * 3 + 2)], want, 1e-3);
  Tensor n = run_layer(L::Resizing(3, 4, {.interpolation = "nearest"}), x, false).y;
  EXPECT_EQ(n.to_vector()[size_t(((1 * 3 + 1) * 4 + 2) * 3 + 2)], px(1, 3, 5, 2));
  // uint8 input is cast to float32.
  Tensor u = Tensor::zeros({1, 4, 4, 1}, DType::u8);
  u.data<uint8_t>()[5] = 200;
  Tensor uc = run_layer(L::CenterCrop(2, 2), u, false).y;
  EXPECT_EQ(uc.dtype(), DType::f32);
  EXPECT_EQ(uc.to_vector(), (std::vector<float>{200, 0, 0, 0}));
}

TEST(Preprocessing, NormalizationAdaptComputesMeanAndVariance) {
  // Per channel (axis -1) of [N, 2, 3]: channel k holds k + i*(k+1) for sample i.
  const int N = 10;
  std::vector<float> v;
  for (int i = 0; i < N; ++i)
    for (int p = 0; p < 2; ++p)
      for (int k = 0; k < 3; ++k) v.push_back(float(k + i * (k + 1) + p));
  Tensor x = Tensor::from_vector({N, 2, 3}, v);
  auto norm = L::Normalization();
  norm.adapt(x);
  ASSERT_EQ(norm->weights().size(), 3u);  // mean, variance and Keras's int64 count
  EXPECT_EQ(norm->weights()[0]->name, norm->name() + "/mean");
  EXPECT_EQ(norm->weights()[2]->name, norm->name() + "/count");
  EXPECT_EQ(norm->weights()[2]->value.dtype(), DType::i64);
  EXPECT_EQ(norm->weights()[2]->value.data<int64_t>()[0], 2 * N);
  auto mean = norm->weights()[0]->value.to_vector(), var = norm->weights()[1]->value.to_vector();
  for (int k = 0; k < 3; ++k) {
    double m = 0, s = 0;
    for (size_t e = size_t(k); e < v.size(); e += 3) m += v[e];
    m /= 2 * N;
    for (size_t e = size_t(k); e < v.size(); e += 3) s += (v[e] - m) * (v[e] - m);
    EXPECT_NEAR(mean[size_t(k)], m, 1e-4);
    EXPECT_NEAR(var[size_t(k)], s / (2 * N), 1e-3);
  }
  // Streaming over a Dataset in batches of 3 gives the same statistics.
  auto norm2 = L::Normalization();
  norm2.adapt(data::Dataset::from_tensor_slices(x).batch(3));
  auto mean2 = norm2->weights()[0]->value.to_vector(),
       var2 = norm2->weights()[1]->value.to_vector();
  for (int k = 0; k < 3; ++k) {
    EXPECT_NEAR(mean2[size_t(k)], mean[size_t(k)], 1e-4);
    EXPECT_NEAR(var2[size_t(k)], var[size_t(k)], 1e-3);
  }
  // The layer computes (x - mean) / sqrt(var).
  Tensor y = run_layer(norm, x, false).y;
  auto yv = y.to_vector();
  for (size_t e = 0; e < v.size(); ++e)
    EXPECT_NEAR(yv[e], (v[e] - mean[e % 3]) / std::sqrt(var[e % 3]), 1e-4);
  // Fixed statistics, a zero variance (epsilon 1e-7 as Keras) and invert.
  auto fixed = L::Normalization({.mean = {1, 2, 3}, .variance = {4, 0, 1}});
  Tensor f = run_layer(fixed, Tensor::from_vector({1, 3}, {3, 2, 5}), false).y;
  EXPECT_NEAR(f.to_vector()[0], 1.0, 1e-6);
  EXPECT_NEAR(f.to_vector()[1], 0.0, 1e-6);
  EXPECT_NEAR(f.to_vector()[2], 2.0, 1e-6);
  EXPECT_TRUE(fixed->weights().empty());
  auto inv = L::Normalization({.mean = {1}, .variance = {4}, .invert = true});
  EXPECT_NEAR(run_layer(inv, Tensor::from_vector({1, 2}, {1, -1}), false).y.to_vector()[1], -1.0,
              1e-6);
  // axis=None: one scalar statistic.
  auto all = L::Normalization({.axis = {}});
  all.adapt(Tensor::from_vector({2, 2}, {1, 2, 3, 4}));
  EXPECT_NEAR(all->weights()[0]->value.item(), 2.5, 1e-6);
  EXPECT_NEAR(all->weights()[1]->value.item(), 1.25, 1e-6);
}

TEST(Preprocessing, ConfigsUseKerasKeys) {
  json f = L::RandomFlip("horizontal")->config();
  EXPECT_EQ(f["mode"], "horizontal");
  EXPECT_TRUE(f["seed"].is_null());
  json r = L::RandomRotation(0.1, {.seed = 5})->config();
  EXPECT_EQ(r["factor"], 0.1);
  EXPECT_EQ(r["fill_mode"], "reflect");
  EXPECT_EQ(r["interpolation"], "bilinear");
  EXPECT_EQ(r["fill_value"], 0.0);
  EXPECT_EQ(r["seed"], 5);
  json z = L::RandomZoom({-0.2, 0.3})->config();
  EXPECT_EQ(z["height_factor"], json::parse("[-0.2, 0.3]"));
  EXPECT_TRUE(z["width_factor"].is_null());
  json t = L::RandomTranslation(0.1, 0.2)->config();
  EXPECT_EQ(t["height_factor"], 0.1);
  EXPECT_EQ(t["width_factor"], 0.2);
  json c = L::RandomContrast(0.3)->config();
  // The pair: Keras 3 would read one number 0.3 as (0, 0.3), a factor in [1, 1.3].
  EXPECT_EQ(c["factor"], json::parse("[0.3, 0.3]"));
  EXPECT_EQ(c["value_range"], json::parse("[0, 255]"));
  EXPECT_EQ(L::RandomBrightness(0.2)->config()["value_range"], json::parse("[0, 255]"));
  json rc = L::RandomCrop(4, 5)->config();
  EXPECT_EQ(rc["height"], 4);
  EXPECT_EQ(rc["width"], 5);
  EXPECT_EQ(L::CenterCrop(4, 5)->class_name(), "CenterCrop");
  json rs = L::Resizing(8, 9, {.interpolation = "nearest"})->config();
  EXPECT_EQ(rs["interpolation"], "nearest");
  EXPECT_EQ(rs["crop_to_aspect_ratio"], false);
  json n = L::Normalization({.mean = {1}, .variance = {2}})->config();
  EXPECT_EQ(n["axis"], json::parse("[-1]"));
  EXPECT_EQ(n["mean"], json::parse("[1.0]"));
  EXPECT_EQ(n["invert"], false);
  for (auto l : {L::RandomFlip(), L::RandomRotation(0.1), L::RandomZoom(0.1),
                 L::RandomTranslation(0.1, 0.1), L::RandomContrast(0.1), L::RandomBrightness(0.1),
                 L::RandomCrop(2, 2), L::CenterCrop(2, 2), L::Resizing(2, 2)})
    EXPECT_TRUE(l->config().contains("name") && l->config().contains("trainable"));
}

TEST(Preprocessing, BadArgumentsNameTheLayer) {
  EXPECT_NE(error_of([] { L::RandomFlip("sideways", 0, "flip"); }).find("RandomFlip 'flip'"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              L::RandomRotation(0.1, {.fill_mode = "mirror", .name = "rot"});
            }).find("RandomRotation 'rot': fill_mode"),
            std::string::npos);
  EXPECT_NE(error_of([] { L::RandomZoom({-1.2, 0.1}); }).find("height_factor"), std::string::npos);
  EXPECT_NE(error_of([] { L::RandomBrightness(2.0); }).find("factor"), std::string::npos);
  EXPECT_NE(error_of([] {
              L::RandomContrast(0.1, {.value_range = {1, 0}});
            }).find("value_range"),
            std::string::npos);
  EXPECT_NE(error_of([] { L::Resizing(0, 3); }).find("positive"), std::string::npos);
  EXPECT_NE(error_of([] { L::Normalization({.mean = {1}}); }).find("variance"), std::string::npos);
  auto in = L::Input({8});
  EXPECT_NE(error_of([&] { L::RandomFlip()(in); }).find("(batch, height, width, channels)"),
            std::string::npos);
}

namespace {

// Brightness classes (invariant under flips and rotations): 0 dim, 1 mid, 2 bright, in 0..255.
std::pair<Tensor, Tensor> brightness_data(int64_t n, uint64_t seed) {
  Tensor x = Tensor::empty(Shape{n, 8, 8, 3});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  Philox rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    int c = int(rng.next_u32() % 3);
    y.data<int32_t>()[i] = c;
    for (int k = 0; k < 8 * 8 * 3; ++k)
      x.data<float>()[i * 192 + k] = 40.f + 80.f * float(c) + rng.uniform(-30.f, 30.f);
  }
  return {x, y};
}

}  // namespace

TEST(Preprocessing, ModelWithAugmentationLayersTrains) {
  // Inputs centred on zero and 8 filters: with inputs in [0, 1] and 4 filters, 9 of 40 weight
  // seeds let every ReLU die and the loss stay at ln 3. Here the last epoch's loss is at most
  // 0.36 of the first over 300 seeds (--gtest_repeat=300, each repeat a new layer-name seed).
  using namespace layers;
  set_random_seed(3);
  Model m = Sequential({Input({8, 8, 3}), RandomFlip("horizontal"), RandomRotation(0.1),
                        RandomZoom(0.1), Rescaling(1.0 / 127.5, -1),
                        Conv2D(8, 3, {.activation = "relu"}), GlobalAveragePooling2D(), Dense(3)});
  m.compile({.optimizer = optimizers::Adam(2e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  auto [x, y] = brightness_data(128, 1);
  auto h = m.fit(x, y, {.batch_size = 16, .epochs = 8, .verbose = 0});
  auto& loss = h.history["loss"];
  for (double l : loss) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(loss.back(), 0.8 * loss.front());
  // predict runs the inference graph: augmentation is the identity there.
  Tensor p1 = m.predict(x.slice(0, 4)), p2 = m.predict(x.slice(0, 4));
  EXPECT_EQ(p1.to_vector(), p2.to_vector());
}

TEST(Preprocessing, GradientsFlowThroughAugmentationAfterWeights) {
  // Augmentation between layers with weights: the gradient replays the drawn transformation.
  using namespace layers;
  set_random_seed(4);
  Model m = Sequential({Input({8, 8, 3}), Rescaling(1.0 / 255),
                        Conv2D(4, 3, {.padding = "same", .activation = "relu"}), RandomFlip(),
                        RandomRotation(0.05, {.fill_mode = "nearest"}), RandomTranslation(0.1, 0.1),
                        RandomContrast(0.2, {.value_range = {0, 10}}),
                        RandomBrightness(0.05, {.value_range = {0, 10}}), RandomCrop(6, 6),
                        GlobalAveragePooling2D(), Dense(3)});
  m.compile({.optimizer = optimizers::Adam(2e-2),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  auto [x, y] = brightness_data(96, 2);
  auto h = m.fit(x, y, {.batch_size = 16, .epochs = 5, .verbose = 0});
  for (double l : h.history["loss"]) EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(h.history["loss"].back(), h.history["loss"].front());
}

TEST(Preprocessing, ResizingBetweenWeightsAndLossSaysItHasNoGradient) {
  using namespace layers;
  Model m = Sequential({Input({8, 8, 1}), Conv2D(2, 3), Resizing(4, 4), Flatten(), Dense(2)});
  m.compile({.optimizer = optimizers::SGD(0.1),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  Tensor x = images({4, 8, 8, 1}, 5, 0, 1);
  Tensor y = Tensor::from_vector_i32({4}, {0, 1, 0, 1});
  std::string msg = error_of([&] { m.fit(x, y, {.batch_size = 4, .verbose = 0}); });
  EXPECT_NE(msg.find("image_resize"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no gradient"), std::string::npos) << msg;
  // Right after the Input it is fine.
  Model ok = Sequential({Input({8, 8, 1}), Resizing(4, 4), Conv2D(2, 3), Flatten(), Dense(2)});
  ok.compile({.optimizer = optimizers::SGD(0.1),
              .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  EXPECT_EQ(error_of([&] { ok.fit(x, y, {.batch_size = 4, .verbose = 0}); }), "");
}
