// Multi-input, multi-output models in fit / evaluate / predict and the *_on_batch calls,
// against Keras 3.15.1 on JAX: the same two-input, two-output functional model, weights, data
// and SGD steps; the numbers below were printed by this script (KERAS_BACKEND=jax,
// .venv-interop):
//
//   import numpy as np, keras
//   def vals(n, k, s=0.5):
//       return (np.sin(np.arange(n) * 0.37 + k) * s).astype("float32")
//   a = keras.Input((3,), name="a"); b = keras.Input((2,), name="b")
//   h = keras.layers.Concatenate()([a, b])
//   h = keras.layers.Dense(4, activation="tanh", name="hidden")(h)
//   reg = keras.layers.Dense(2, name="reg")(h)
//   cls = keras.layers.Dense(3, name="cls")(h)
//   m = keras.Model([a, b], [reg, cls])
//   m.get_layer("hidden").set_weights([vals(20, 1).reshape(5, 4), vals(4, 2, 0.1)])
//   m.get_layer("reg").set_weights([vals(8, 3).reshape(4, 2), vals(2, 4, 0.1)])
//   m.get_layer("cls").set_weights([vals(12, 5).reshape(4, 3), vals(3, 6, 0.1)])
//   xa = vals(24, 7, 1.0).reshape(8, 3); xb = vals(16, 8, 1.0).reshape(8, 2)
//   y1 = vals(16, 9, 1.0).reshape(8, 2); y2 = np.array([0, 2, 1, 1, 0, 2, 2, 1], dtype="int32")
//   m.compile(optimizer=keras.optimizers.SGD(0.1),
//             loss=["mse", keras.losses.SparseCategoricalCrossentropy(from_logits=True)],
//             loss_weights=[0.5, 2.0], metrics=[["mae"], ["accuracy"]])
//   hist = m.fit([xa, xb], [y1, y2], batch_size=4, epochs=2, shuffle=False, verbose=0)
//   print({k: v for k, v in sorted(hist.history.items())})
//   for l in ["hidden", "reg", "cls"]:
//       print(l, [w.flatten().tolist() for w in m.get_layer(l).get_weights()])
//   print(m.evaluate([xa, xb], [y1, y2], batch_size=3, verbose=0, return_dict=True))
//
// Keras 3 logs "loss" (0.5 * reg_loss + 2 * cls_loss), "reg_loss" and "cls_loss" (each
// output's loss without its weight) and "reg_mae", "cls_accuracy".
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;
using test_util::error_of;

namespace {

// np.sin(np.arange(n) * 0.37 + k) * s
Tensor vals(Shape shape, int k, float s = 0.5f) {
  std::vector<float> v(size_t(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(std::sin(double(i) * 0.37 + k) * s);
  return Tensor::from_vector(shape, v);
}

struct Data {
  Tensor xa = vals(Shape{8, 3}, 7, 1.0f), xb = vals(Shape{8, 2}, 8, 1.0f);
  Tensor y1 = vals(Shape{8, 2}, 9, 1.0f);
  Tensor y2 = Tensor::from_vector_i32(Shape{8}, {0, 2, 1, 1, 0, 2, 2, 1});
  std::vector<Tensor> xs() const { return {xa, xb}; }
  std::vector<Tensor> ys() const { return {y1, y2}; }
};

void set_layer(Model& m, const std::string& name, const Tensor& kernel, const Tensor& bias) {
  auto layer = m.get_layer(name);
  layer->weights().at(0)->value.copy_from(kernel);
  layer->weights().at(1)->value.copy_from(bias);
}

Model two_headed(CompileConfig config) {
  reset_layer_names();
  KTensor a = layers::Input({3}, "a"), b = layers::Input({2}, "b");
  KTensor h = layers::Concatenate()({a, b});
  h = layers::Dense(4, {.activation = "tanh", .name = "hidden"})(h);
  KTensor reg = layers::Dense(2, {.name = "reg"})(h);
  KTensor cls = layers::Dense(3, {.name = "cls"})(h);
  Model m({a, b}, {reg, cls}, "two_headed");
  set_layer(m, "hidden", vals(Shape{5, 4}, 1), vals(Shape{4}, 2, 0.1f));
  set_layer(m, "reg", vals(Shape{4, 2}, 3), vals(Shape{2}, 4, 0.1f));
  set_layer(m, "cls", vals(Shape{4, 3}, 5), vals(Shape{3}, 6, 0.1f));
  m.compile(std::move(config));
  return m;
}

CompileConfig keras_config() {
  return {
      .optimizer = optimizers::SGD(0.1),
      .losses = {losses::get("mse"), losses::SparseCategoricalCrossentropy({.from_logits = true})},
      .loss_weights = {0.5, 2.0},
      .output_metrics = {{"mae"}, {"accuracy"}}};
}

// Keras's history of the two epochs, and the weights after them.
const std::map<std::string, std::vector<double>> kHistory{
    {"cls_accuracy", {0.375, 0.5}},
    {"cls_loss", {1.0656605958938599, 1.0453803539276123}},
    {"loss", {2.5557827949523926, 2.4271607398986816}},
    {"reg_loss", {0.8489231467247009, 0.672799825668335}},
    {"reg_mae", {0.772127091884613, 0.6822224855422974}}};
const std::vector<std::vector<float>> kWeights{
    {0.43802428245544434f, 0.4636807143688202f,   0.4198054075241089f,   0.3462028205394745f,
     0.32507699728012085f, 0.11340240389108658f,  -0.11854831129312515f, -0.3015100657939911f,
     -0.3489595949649811f, -0.49418190121650696f, -0.5749326944351196f,  -0.5435312390327454f,
     -0.3785531520843506f, -0.277301162481308f,   -0.11260157078504562f, 0.08886057883501053f,
     0.2960987985134125f,  0.3637100160121918f,   0.4065704941749573f,   0.4269064664840698f},
    {0.093143031001091f, 0.07697591930627823f, 0.03757983446121216f, -0.004077545832842588f},
    {0.1109662801027298f, -0.0728674978017807f, -0.24077457189559937f, -0.3765186369419098f,
     -0.44848334789276123f, -0.46763718128204346f, -0.4019080698490143f, -0.29861631989479065f},
    {-0.07211858034133911f, -0.07315617054700851f},
    {-0.5266924500465393f, -0.3911050260066986f, -0.21582473814487457f, -0.12549687922000885f,
     0.12985514104366302f, 0.27572837471961975f, 0.37445324659347534f, 0.5398997068405151f,
     0.46835675835609436f, 0.426824688911438f, 0.4036731719970703f, 0.11909110844135284f},
    {-0.06840997189283371f, 0.037819258868694305f, 0.05542890354990959f}};
// m.evaluate([xa, xb], [y1, y2], batch_size=3) after the two epochs.
const std::map<std::string, double> kEvaluate{{"cls_accuracy", 0.5},
                                              {"cls_loss", 1.0181446075439453},
                                              {"loss", 2.321423292160034},
                                              {"reg_loss", 0.570267915725708},
                                              {"reg_mae", 0.628548264503479}};

void expect_keras_history(const History& h, Model& m, const char* what) {
  SCOPED_TRACE(what);
  for (auto& [name, values] : kHistory) {
    ASSERT_TRUE(h.history.count(name)) << name;
    ASSERT_EQ(h.history.at(name).size(), values.size()) << name;
    for (size_t e = 0; e < values.size(); ++e)
      EXPECT_NEAR(h.history.at(name)[e], values[e], 3e-6) << name << " epoch " << e;
  }
  std::vector<Tensor> got;
  for (const char* layer : {"hidden", "reg", "cls"})
    for (auto& v : m.get_layer(layer)->weights()) got.push_back(v->value);
  ASSERT_EQ(got.size(), kWeights.size());
  for (size_t w = 0; w < got.size(); ++w) {
    std::vector<float> values = got[w].to_vector();
    ASSERT_EQ(values.size(), kWeights[w].size());
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(values[i], kWeights[w][i], 2e-6) << "weight " << w << "[" << i << "]";
  }
}

data::Dataset element_batches(const Data& d, int batch, Tensor sample_weight = {}) {
  std::vector<data::Component> parts{d.xa, d.xb, d.y1, d.y2};
  if (sample_weight.defined()) parts.emplace_back(sample_weight);
  return data::Dataset::from_tensor_slices(parts).batch(batch);
}

}  // namespace

TEST(MultiOutput, FitAndEvaluateMatchKeras) {
  Data d;
  Model m = two_headed(keras_config());
  EXPECT_EQ(m.output_names(), (std::vector<std::string>{"reg", "cls"}));
  History h = m.fit(d.xs(), d.ys(), {.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false});
  expect_keras_history(h, m, "fit(xs, ys)");
  Logs logs = m.evaluate(d.xs(), d.ys(), {.batch_size = 3, .verbose = 0});
  for (auto& [name, value] : kEvaluate) EXPECT_NEAR(logs.at(name), value, 3e-6) << name;
  EXPECT_EQ(logs.size(), kEvaluate.size());  // no other keys
}

TEST(MultiOutput, DatasetElementsMatchArrays) {
  Data d;
  Model m = two_headed(keras_config());
  History h = m.fit(element_batches(d, 4), {.epochs = 2, .verbose = 0});
  expect_keras_history(h, m, "fit(Dataset {a, b, y1, y2})");
  Logs logs = m.evaluate(element_batches(d, 3), {.verbose = 0});
  for (auto& [name, value] : kEvaluate) EXPECT_NEAR(logs.at(name), value, 3e-6) << name;
  // predict takes {a, b} elements (and ignores the targets of {a, b, y1, y2}).
  std::vector<Tensor> by_dataset = m.predict(element_batches(d, 3));
  std::vector<Tensor> by_arrays = m.predict(d.xs(), {.batch_size = 5});
  ASSERT_EQ(by_dataset.size(), 2u);
  for (size_t o = 0; o < 2; ++o) {
    std::vector<float> a = by_dataset[o].to_vector(), b = by_arrays[o].to_vector();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  }
}

// The loss is the loss-weighted sum of the outputs' losses, each computed here by hand from
// predict()'s outputs; changing loss_weights changes "loss" only.
TEST(MultiOutput, LossWeightsAndPerOutputLossesByHand) {
  Data d;
  Model m = two_headed(keras_config());
  std::vector<Tensor> pred = m.predict(d.xs(), {.batch_size = 8});
  ASSERT_EQ(pred.size(), 2u);
  EXPECT_EQ(pred[0].shape(), (Shape{8, 2}));
  EXPECT_EQ(pred[1].shape(), (Shape{8, 3}));
  std::vector<float> p0 = pred[0].to_vector(), p1 = pred[1].to_vector();
  std::vector<float> y1 = d.y1.to_vector(), y2 = d.y2.to_vector();
  double mse = 0, mae = 0, sce = 0, correct = 0;
  for (size_t i = 0; i < 16; ++i) {
    mse += (p0[i] - y1[i]) * (p0[i] - y1[i]) / 16;
    mae += std::abs(p0[i] - y1[i]) / 16;
  }
  for (size_t r = 0; r < 8; ++r) {
    const float* z = &p1[r * 3];
    const double mx = std::max({z[0], z[1], z[2]});
    const double lse =
        mx + std::log(std::exp(z[0] - mx) + std::exp(z[1] - mx) + std::exp(z[2] - mx));
    const int label = int(y2[r]);
    sce += (lse - z[label]) / 8;
    correct += int(std::max_element(z, z + 3) - z) == label ? 1 : 0;
  }
  Logs logs = m.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0});
  EXPECT_NEAR(logs.at("reg_loss"), mse, 1e-5);
  EXPECT_NEAR(logs.at("cls_loss"), sce, 1e-5);
  EXPECT_NEAR(logs.at("loss"), 0.5 * mse + 2.0 * sce, 1e-5);
  EXPECT_NEAR(logs.at("reg_mae"), mae, 1e-5);
  EXPECT_NEAR(logs.at("cls_accuracy"), correct / 8, 1e-6);

  CompileConfig other = keras_config();
  other.loss_weights = {3.0, 0.25};
  Model w = two_headed(other);
  Logs wl = w.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0});
  EXPECT_NEAR(wl.at("reg_loss"), mse, 1e-5);
  EXPECT_NEAR(wl.at("loss"), 3.0 * mse + 0.25 * sce, 1e-5);
  // The weights steer the gradient: one step with weights {1, 0} equals training the
  // regression head alone (the classification loss then reaches no weight).
  CompileConfig reg_only = keras_config();
  reg_only.loss_weights = {1.0, 0.0};
  Model r = two_headed(reg_only);
  r.train_on_batch(d.xs(), d.ys());
  Model single = [] {
    reset_layer_names();
    KTensor a = layers::Input({3}, "a"), b = layers::Input({2}, "b");
    KTensor h = layers::Concatenate()({a, b});
    h = layers::Dense(4, {.activation = "tanh", .name = "hidden"})(h);
    KTensor reg = layers::Dense(2, {.name = "reg"})(h);
    Model s({a, b}, {reg}, "reg_only");
    set_layer(s, "hidden", vals(Shape{5, 4}, 1), vals(Shape{4}, 2, 0.1f));
    set_layer(s, "reg", vals(Shape{4, 2}, 3), vals(Shape{2}, 4, 0.1f));
    s.compile({.optimizer = optimizers::SGD(0.1), .loss = losses::get("mse")});
    return s;
  }();
  Logs sl = single.train_on_batch(d.xs(), {d.y1});
  EXPECT_EQ(sl.count("reg_loss"), 0u);  // one output: no per-output loss
  for (const char* layer : {"hidden", "reg"}) {
    auto wr = r.get_layer(layer)->weights(), ws = single.get_layer(layer)->weights();
    for (size_t k = 0; k < wr.size(); ++k) {
      std::vector<float> a = wr[k]->value.to_vector(), b = ws[k]->value.to_vector();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << layer << k << i;
    }
  }
}

TEST(MultiOutput, OnBatchCallsAndSampleWeights) {
  Data d;
  Model a = two_headed(keras_config());
  Model b = two_headed(keras_config());
  // train_on_batch on the first 4 rows == one fit step on them.
  std::vector<Tensor> xs{d.xa.slice(0, 4).contiguous(), d.xb.slice(0, 4).contiguous()};
  std::vector<Tensor> ys{d.y1.slice(0, 4).contiguous(), d.y2.slice(0, 4).contiguous()};
  Logs la = a.train_on_batch(xs, ys);
  History hb = b.fit(xs, ys, {.batch_size = 4, .verbose = 0, .shuffle = false});
  for (const char* k : {"loss", "reg_loss", "cls_loss", "reg_mae", "cls_accuracy"})
    EXPECT_NEAR(la.at(k), hb.history.at(k)[0], 1e-6) << k;
  EXPECT_NEAR(la.at("loss"), kHistory.at("loss")[0], 0.5);  // sanity: same scale as Keras
  Logs ta = a.test_on_batch(d.xs(), d.ys());
  Logs tb = b.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0});
  for (auto& [k, v] : tb) EXPECT_NEAR(ta.at(k), v, 1e-6) << k;
  std::vector<Tensor> pa = a.predict_on_batch(d.xs());
  ASSERT_EQ(pa.size(), 2u);
  EXPECT_EQ(pa[1].shape(), (Shape{8, 3}));

  // One sample_weight weighs every output's loss: sum(l * w) / batch for each output.
  Tensor sw = Tensor::from_vector(Shape{8}, {0.5f, 2, 1, 3, 0, 1.5f, 1, 2.5f});
  Logs weighted = a.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0, .sample_weight = sw});
  std::vector<Tensor> p = a.predict(d.xs());
  std::vector<float> p0 = p[0].to_vector(), y1 = d.y1.to_vector(), w = sw.to_vector();
  double reg = 0;
  for (size_t r = 0; r < 8; ++r)
    for (size_t c = 0; c < 2; ++c)
      reg += w[r] * (p0[r * 2 + c] - y1[r * 2 + c]) * (p0[r * 2 + c] - y1[r * 2 + c]) / 2 / 8;
  EXPECT_NEAR(weighted.at("reg_loss"), reg, 1e-5);
  // ... and a Dataset's last component carries them.
  Logs by_dataset = a.evaluate(element_batches(d, 8, sw), {.verbose = 0});
  for (auto& [k, v] : weighted) EXPECT_NEAR(by_dataset.at(k), v, 1e-6) << k;
}

// validation_split and validation_data for several inputs / outputs: the val_ logs equal an
// evaluate() of the same rows.
TEST(MultiOutput, Validation) {
  Data d;
  Model m = two_headed(keras_config());
  History h = m.fit(d.xs(), d.ys(),
                    {.batch_size = 4, .verbose = 0, .validation_split = 0.5, .shuffle = false});
  Model fresh = two_headed(keras_config());
  auto head = [](const Tensor& t) { return t.slice(0, 4).contiguous(); };
  auto tail = [](const Tensor& t) { return t.slice(4, 8).contiguous(); };
  fresh.fit({head(d.xa), head(d.xb)}, {head(d.y1), head(d.y2)},
            {.batch_size = 4, .verbose = 0, .shuffle = false});
  Logs val = fresh.evaluate({tail(d.xa), tail(d.xb)}, {tail(d.y1), tail(d.y2)},
                            {.batch_size = 4, .verbose = 0});
  for (const char* k : {"loss", "reg_loss", "cls_loss", "reg_mae", "cls_accuracy"})
    EXPECT_NEAR(h.history.at(std::string("val_") + k).at(0), val.at(k), 1e-6) << k;

  Model v = two_headed(keras_config());
  History hv = v.fit(d.xs(), d.ys(),
                     {.batch_size = 4,
                      .verbose = 0,
                      .validation_data = ValidationData::arrays(d.xs(), d.ys()),
                      .shuffle = false});
  Logs after = v.evaluate(d.xs(), d.ys(), {.batch_size = 4, .verbose = 0});
  EXPECT_NEAR(hv.history.at("val_loss").at(0), after.at("loss"), 1e-6);
  EXPECT_NEAR(hv.history.at("val_cls_loss").at(0), after.at("cls_loss"), 1e-6);
}

// Metric names: several metrics per output, a weighted metric, and a name two outputs share.
TEST(MultiOutput, MetricNames) {
  Data d;
  CompileConfig cfg = keras_config();
  cfg.output_metrics = {{"mae", "mse"}, {"accuracy"}};
  cfg.output_weighted_metrics = {{}, {"accuracy"}};
  Model m = two_headed(cfg);
  std::vector<std::string> names = m.metric_log_names();
  EXPECT_EQ(names, (std::vector<std::string>{"loss", "reg_loss", "cls_loss", "reg_mae", "reg_mse",
                                             "cls_accuracy", "cls_weighted_accuracy"}));
  EXPECT_EQ(m.metrics().size(), names.size());
  // Unweighted, reg_mse is reg_loss (the same mean squared error of the same output).
  Logs plain_logs = m.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0});
  EXPECT_NEAR(plain_logs.at("reg_mse"), plain_logs.at("reg_loss"), 1e-6);
  EXPECT_NE(plain_logs.at("reg_mse"), plain_logs.at("reg_mae"));
  Tensor sw = Tensor::from_vector(Shape{8}, {0.5f, 2, 1, 3, 0, 1.5f, 1, 2.5f});
  Logs logs = m.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0, .sample_weight = sw});
  std::vector<float> p1 = m.predict(d.xs())[1].to_vector(), y2 = d.y2.to_vector(),
                     w = sw.to_vector();
  double hit = 0, total = 0, plain = 0;
  for (size_t r = 0; r < 8; ++r) {
    const float* z = &p1[r * 3];
    const bool ok = int(std::max_element(z, z + 3) - z) == int(y2[r]);
    hit += ok ? w[r] : 0, total += w[r], plain += ok ? 1 : 0;
  }
  EXPECT_NEAR(logs.at("cls_weighted_accuracy"), hit / total, 1e-6);
  EXPECT_NEAR(logs.at("cls_accuracy"), plain / 8, 1e-6);

  // One loss for every output (Keras's single loss): each output gets it.
  Model all_mse = two_headed({.optimizer = optimizers::SGD(0.1), .loss = losses::get("mse")});
  Tensor onehot = Tensor::from_vector(Shape{8, 3}, std::vector<float>(24, 0.25f));
  Logs l = all_mse.evaluate(d.xs(), {d.y1, onehot}, {.batch_size = 8, .verbose = 0});
  EXPECT_NEAR(l.at("loss"), l.at("reg_loss") + l.at("cls_loss"), 1e-6);
  EXPECT_GT(l.at("cls_loss"), 0);
}

TEST(MultiOutput, MismatchedArgumentsAreClearErrors) {
  Data d;
  Model m = two_headed(keras_config());
  std::string e = error_of([&] { m.fit(d.xs(), {d.y1}, {.verbose = 0}); });
  EXPECT_NE(e.find("y has 1 array but model 'two_headed' has 2 outputs (reg, cls)"),
            std::string::npos)
      << e;
  e = error_of([&] { m.evaluate({d.xa}, d.ys(), {.verbose = 0}); });
  EXPECT_NE(e.find("x has 1 array but model 'two_headed' has 2 inputs (a, b)"), std::string::npos)
      << e;
  e = error_of([&] { m.fit({d.xb, d.xa}, d.ys(), {.verbose = 0}); });
  EXPECT_NE(e.find("x[0] has shape"), std::string::npos) << e;
  e = error_of([&] { m.predict(d.xa); });
  EXPECT_NE(e.find("has 2 outputs"), std::string::npos) << e;
  e = error_of([&] {
    m.fit(data::Dataset::from_tensor_slices({d.xa, d.xb, d.y1}).batch(4), {.verbose = 0});
  });
  EXPECT_NE(e.find("{x_1..x_2, y_1..y_2}"), std::string::npos) << e;
  e = error_of([&] { m.fit(d.xs(), d.ys(), {.verbose = 0, .class_weight = {{0, 2.0}}}); });
  EXPECT_NE(e.find("class_weight is only supported for models with a single output"),
            std::string::npos)
      << e;

  Model c = two_headed({});
  e = error_of(
      [&] { c.compile({.optimizer = optimizers::SGD(0.1), .losses = {losses::get("mse")}}); });
  EXPECT_NE(e.find("compile: losses has 1 entries but model 'two_headed' has 2 outputs"),
            std::string::npos)
      << e;
  e = error_of([&] {
    c.compile({.optimizer = optimizers::SGD(0.1),
               .loss = losses::get("mse"),
               .loss_weights = {1.0, 2.0, 3.0}});
  });
  EXPECT_NE(e.find("loss_weights has 3 entries"), std::string::npos) << e;
  e = error_of([&] {
    c.compile({.optimizer = optimizers::SGD(0.1), .loss = losses::get("mse"), .metrics = {"mae"}});
  });
  EXPECT_NE(e.find("output_metrics"), std::string::npos) << e;
}

// Two mirrored replicas split each batch of 4 into 2 + 2 and all-reduce the gradients: the
// history and the weights equal one replica's (Keras's numbers).
TEST(MultiOutput, TwoReplicasMatchOne) {
  Data d;
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = [&] {
    auto scope = strategy.scope();
    return two_headed(keras_config());
  }();
  History h = m.fit(d.xs(), d.ys(), {.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false});
  expect_keras_history(h, m, "2 replicas");
  Logs logs = m.evaluate(d.xs(), d.ys(), {.batch_size = 3, .verbose = 0});
  for (auto& [name, value] : kEvaluate) EXPECT_NEAR(logs.at(name), value, 3e-6) << name;
  Model one = two_headed(keras_config());
  one.fit(d.xs(), d.ys(), {.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false});
  std::vector<Tensor> p2 = m.predict(d.xs(), {.batch_size = 5}), p1 = one.predict(d.xs());
  for (size_t o = 0; o < 2; ++o) {
    std::vector<float> a = p2[o].to_vector(), b = p1[o].to_vector();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6);
  }
}

// A .keras file keeps the per-output compile config (Keras's list forms) and load_model
// compiles the model with it: the same logs.
TEST(MultiOutput, KerasFileKeepsPerOutputCompileConfig) {
  Data d;
  Model m = two_headed(keras_config());
  const std::string path = ::testing::TempDir() + "lockstep_multi_output.keras";
  m.save(path);
  Model loaded = load_model(path);
  const CompileConfig& c = loaded.compile_config();
  EXPECT_EQ(c.losses.size(), 2u);
  EXPECT_EQ(c.loss_weights, (std::vector<double>{0.5, 2.0}));
  EXPECT_EQ(c.output_metrics, (std::vector<std::vector<std::string>>{{"mae"}, {"accuracy"}}));
  Logs a = m.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0});
  Logs b = loaded.evaluate(d.xs(), d.ys(), {.batch_size = 8, .verbose = 0});
  ASSERT_EQ(a.size(), b.size());
  for (auto& [k, v] : a) EXPECT_NEAR(b.at(k), v, 1e-6) << k;
}

// ---- Keras's dict structure ---------------------------------------------------------------

namespace {

// keras_config() with its lists keyed by output name.
CompileConfig keras_dict_config() {
  return {.optimizer = optimizers::SGD(0.1),
          .losses = {{"reg", losses::get("mse")},
                     {"cls", losses::SparseCategoricalCrossentropy({.from_logits = true})}},
          .loss_weights = {{"cls", 2.0}, {"reg", 0.5}},
          .output_metrics = PerOutput<std::vector<std::string>>::by_name(
              {{"reg", {"mae"}}, {"cls", {"accuracy"}}})};
}

}  // namespace

TEST(MultiOutput, DictStructureGivesTheListFormsResults) {
  Data d;
  Model m = two_headed(keras_dict_config());
  EXPECT_EQ(m.input_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.loss_weights(), (std::vector<double>{0.5, 2.0}));
  const TensorDict x{{"b", d.xb}, {"a", d.xa}}, y{{"cls", d.y2}, {"reg", d.y1}};
  History h = m.fit(x, y, {.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false});
  expect_keras_history(h, m, "fit(dict, dict)");
  Logs logs = m.evaluate(x, y, {.batch_size = 3, .verbose = 0});
  for (auto& [name, value] : kEvaluate) EXPECT_NEAR(logs.at(name), value, 3e-6) << name;
  // The list form on a twin trained the same way: the same numbers exactly.
  Model list = two_headed(keras_config());
  History hl =
      list.fit(d.xs(), d.ys(), {.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false});
  for (auto& [name, values] : hl.history)
    if (name.rfind("input_wait", 0) != 0) EXPECT_EQ(h.history.at(name), values) << name;
  EXPECT_EQ(list.evaluate(d.xs(), d.ys(), {.batch_size = 3, .verbose = 0}), logs);
  std::map<std::string, Tensor> pred = m.predict(x, {.batch_size = 5});
  std::vector<Tensor> pred_list = list.predict(d.xs(), {.batch_size = 5});
  ASSERT_EQ(pred.size(), 2u);
  EXPECT_EQ(pred.at("reg").to_vector(), pred_list[0].to_vector());
  EXPECT_EQ(pred.at("cls").to_vector(), pred_list[1].to_vector());
}

TEST(MultiOutput, DictKeysThatAreNoInputOrOutputAreClearErrors) {
  Data d;
  Model m = two_headed(keras_dict_config());
  auto msg = error_of([&] {
    m.fit(TensorDict{{"a", d.xa}, {"c", d.xb}}, {{"reg", d.y1}, {"cls", d.y2}});
  });
  EXPECT_NE(msg.find("x has key 'c', which is not an input of model 'two_headed' (inputs: a, b)"),
            std::string::npos)
      << msg;
  msg = error_of([&] { m.evaluate(TensorDict{{"a", d.xa}, {"b", d.xb}}, {{"reg", d.y1}}); });
  EXPECT_NE(msg.find("y has no array for output 'cls' of model 'two_headed' (outputs: reg, cls)"),
            std::string::npos)
      << msg;
  msg = error_of([&] { m.predict(TensorDict{{"a", d.xa}}); });
  EXPECT_NE(msg.find("no array for input 'b'"), std::string::npos) << msg;
  auto compile_error = [&](CompileConfig c) { return error_of([&] { two_headed(std::move(c)); }); };
  CompileConfig c = keras_dict_config();
  c.losses.erase("cls");
  msg = compile_error(c);
  EXPECT_NE(msg.find("losses has no entry for output 'cls'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(outputs: reg, cls"), std::string::npos) << msg;
  c = keras_dict_config();
  c.loss_weights["regg"] = 1.0;
  msg = compile_error(c);
  EXPECT_NE(msg.find("loss_weights has key 'regg', which is not an output of model "
                     "'two_headed' (outputs: reg, cls)"),
            std::string::npos)
      << msg;
  c = keras_dict_config();
  c.output_metrics["hidden"] = {"mae"};
  EXPECT_NE(compile_error(c).find("output_metrics has key 'hidden'"), std::string::npos);
  // One argument holds one form: a list given after the dict replaces it.
  c = keras_dict_config();
  c.loss_weights = {1.0, 3.0};
  EXPECT_EQ(two_headed(c).loss_weights(), (std::vector<double>{1.0, 3.0}));
  // An output left out of the dict of loss_weights weighs 1; of output_metrics, has none.
  c = keras_dict_config();
  c.loss_weights.erase("reg");
  c.output_metrics.erase("cls");
  Model partial = two_headed(c);
  EXPECT_EQ(partial.loss_weights(), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(partial.metric_log_names(),
            (std::vector<std::string>{"loss", "reg_loss", "cls_loss", "reg_mae"}));
}

// ---- per-output sample weights -------------------------------------------------------------
//
// Keras 3.15.1 (JAX), the model and data of the file's first script, with per-output sample
// weights and weighted metrics:
//   w1 = np.array([0.5, 2, 1, 0, 3, 1.5, 0.25, 1], dtype="float32")
//   w2 = np.array([1, 1, 2, 0.5, 0, 4, 1, 3], dtype="float32")
//   m.compile(optimizer=keras.optimizers.SGD(0.1),
//             loss=["mse", keras.losses.SparseCategoricalCrossentropy(from_logits=True)],
//             loss_weights=[0.5, 2.0], metrics=[["mae"], ["accuracy"]],
//             weighted_metrics=[["mse"], ["accuracy"]])
//   hist = m.fit([xa, xb], [y1, y2], sample_weight=[w1, w2], batch_size=4, epochs=2,
//                shuffle=False, verbose=0)
//   print(hist.history); print(layer weights)
//   print(m.evaluate([xa, xb], [y1, y2], sample_weight=[w1, w2], batch_size=3, verbose=0,
//                    return_dict=True))

namespace {

const std::map<std::string, std::vector<double>> kWeightedHistory{
    {"cls_accuracy", {0.375, 0.625}},
    {"cls_loss", {1.6481939554214478, 1.4518177509307861}},
    {"cls_weighted_accuracy", {0.47999998927116394, 0.8799999952316284}},
    {"loss", {3.7163782119750977, 3.222710132598877}},
    {"reg_loss", {0.8399806618690491, 0.638149619102478}},
    {"reg_mae", {0.7862216234207153, 0.691742479801178}},
    {"reg_mse", {0.7264697551727295, 0.5519132018089294}}};
const std::vector<std::vector<float>> kWeightedWeights{
    {0.425357848405838f,    0.4507107138633728f,   0.42824479937553406f,  0.36974847316741943f,
     0.32490476965904236f,  0.12350180745124817f,  -0.10353575646877289f, -0.29004257917404175f,
     -0.33661431074142456f, -0.46237999200820923f, -0.555378794670105f,   -0.5456940531730652f,
     -0.4136572778224945f,  -0.3292880058288574f,  -0.11898725479841232f, 0.12605689465999603f,
     0.26976603269577026f,  0.33027657866477966f,  0.41019096970558167f,  0.46156758069992065f},
    {0.13147450983524323f, 0.1536230742931366f, 0.07900729030370712f, -0.01045325305312872f},
    {0.10984107106924057f, -0.08071261644363403f, -0.23101961612701416f, -0.37488389015197754f,
     -0.4259534478187561f, -0.45502251386642456f, -0.3711874783039093f, -0.2783876657485962f},
    {-0.11672890931367874f, -0.10696713626384735f},
    {-0.5513835549354553f, -0.3348022997379303f, -0.2474362850189209f, -0.1278933435678482f,
     0.21863071620464325f, 0.1893492192029953f, 0.40060001611709595f, 0.6523033976554871f,
     0.32980626821517944f, 0.4772888422012329f, 0.5233549475669861f, -0.051054857671260834f},
    {-0.26917001605033875f, 0.11651773005723953f, 0.17749039828777313f}};
const std::map<std::string, double> kWeightedEvaluate{{"cls_accuracy", 0.625},
                                                      {"cls_loss", 1.299041509628296},
                                                      {"cls_weighted_accuracy", 0.8799999952316284},
                                                      {"loss", 2.8729515075683594},
                                                      {"reg_loss", 0.549737274646759},
                                                      {"reg_mae", 0.6341537237167358},
                                                      {"reg_mse", 0.47544845938682556}};

CompileConfig keras_weighted_config() {
  CompileConfig c = keras_config();
  c.output_weighted_metrics = {{"mse"}, {"accuracy"}};
  return c;
}

Tensor w1() { return Tensor::from_vector(Shape{8}, {0.5f, 2, 1, 0, 3, 1.5f, 0.25f, 1}); }
Tensor w2() { return Tensor::from_vector(Shape{8}, {1, 1, 2, 0.5f, 0, 4, 1, 3}); }

void expect_weighted_keras(const History& h, Model& m, const Logs& evaluated, const char* what) {
  SCOPED_TRACE(what);
  for (auto& [name, values] : kWeightedHistory) {
    ASSERT_TRUE(h.history.count(name)) << name;
    ASSERT_EQ(h.history.at(name).size(), values.size()) << name;
    for (size_t e = 0; e < values.size(); ++e)
      EXPECT_NEAR(h.history.at(name)[e], values[e], 4e-6) << name << " epoch " << e;
  }
  std::vector<Tensor> got;
  for (const char* layer : {"hidden", "reg", "cls"})
    for (auto& v : m.get_layer(layer)->weights()) got.push_back(v->value);
  ASSERT_EQ(got.size(), kWeightedWeights.size());
  for (size_t w = 0; w < got.size(); ++w) {
    std::vector<float> values = got[w].to_vector();
    ASSERT_EQ(values.size(), kWeightedWeights[w].size());
    for (size_t i = 0; i < values.size(); ++i)
      EXPECT_NEAR(values[i], kWeightedWeights[w][i], 3e-6) << "weight " << w << "[" << i << "]";
  }
  EXPECT_EQ(evaluated.size(), kWeightedEvaluate.size());
  for (auto& [name, value] : kWeightedEvaluate)
    EXPECT_NEAR(evaluated.at(name), value, 4e-6) << name;
}

}  // namespace

TEST(MultiOutput, PerOutputSampleWeightsMatchKeras) {
  Data d;
  const FitConfig fit{.batch_size = 4, .epochs = 2, .verbose = 0, .shuffle = false};
  {  // the list form
    Model m = two_headed(keras_weighted_config());
    FitConfig cfg = fit;
    cfg.output_sample_weights = {w1(), w2()};
    History h = m.fit(d.xs(), d.ys(), cfg);
    Logs logs = m.evaluate(d.xs(), d.ys(),
                           {.batch_size = 3, .verbose = 0, .output_sample_weights = {w1(), w2()}});
    expect_weighted_keras(h, m, logs, "list");
  }
  {  // the dict form, with dict data
    Model m = two_headed(keras_weighted_config());
    FitConfig cfg = fit;
    cfg.sample_weight_by_output = {{"cls", w2()}, {"reg", w1()}};
    const TensorDict x{{"a", d.xa}, {"b", d.xb}}, y{{"reg", d.y1}, {"cls", d.y2}};
    History h = m.fit(x, y, cfg);
    Logs logs = m.evaluate(
        x, y,
        {.batch_size = 3, .verbose = 0, .sample_weight_by_output = {{"reg", w1()}, {"cls", w2()}}});
    expect_weighted_keras(h, m, logs, "dict");
  }
  {  // a Dataset of {a, b, y1, y2, w1, w2} elements
    Model m = two_headed(keras_weighted_config());
    auto batches = [&](int batch) {
      return data::Dataset::from_tensor_slices({d.xa, d.xb, d.y1, d.y2, w1(), w2()}).batch(batch);
    };
    History h = m.fit(batches(4), {.epochs = 2, .verbose = 0});
    expect_weighted_keras(h, m, m.evaluate(batches(3), {.verbose = 0}), "dataset");
  }
}

TEST(MultiOutput, PerOutputSampleWeightsEdgeCases) {
  Data d;
  const FitConfig fit{.batch_size = 4, .epochs = 1, .verbose = 0, .shuffle = false};
  // An output left out of the dict weighs 1: the same as passing ones for it.
  Tensor ones = Tensor::from_vector(Shape{8}, std::vector<float>(8, 1.f));
  Model a = two_headed(keras_weighted_config()), b = two_headed(keras_weighted_config());
  FitConfig fa = fit, fb = fit;
  fa.sample_weight_by_output = {{"cls", w2()}};
  fb.output_sample_weights = {ones, w2()};
  EXPECT_EQ(a.fit(d.xs(), d.ys(), fa).history.at("loss"),
            b.fit(d.xs(), d.ys(), fb).history.at("loss"));
  // The same weights for every output equal one sample_weight.
  Model c = two_headed(keras_weighted_config()), e = two_headed(keras_weighted_config());
  FitConfig fc = fit, fe = fit;
  fc.output_sample_weights = {w1(), w1()};
  fe.sample_weight = w1();
  EXPECT_EQ(c.fit(d.xs(), d.ys(), fc).history.at("loss"),
            e.fit(d.xs(), d.ys(), fe).history.at("loss"));
  // validation_split splits them with x and y.
  FitConfig fv = fit;
  fv.output_sample_weights = {w1(), w2()};
  fv.validation_split = 0.25;
  History hv = two_headed(keras_weighted_config()).fit(d.xs(), d.ys(), fv);
  EXPECT_EQ(hv.history.at("val_loss").size(), 1u);
  // Errors name the output and the model's outputs.
  FitConfig bad = fit;
  bad.sample_weight_by_output = {{"clss", w2()}};
  auto msg = error_of([&] { a.fit(d.xs(), d.ys(), bad); });
  EXPECT_NE(msg.find("sample_weight_by_output has key 'clss', which is not an output of model "
                     "'two_headed' (outputs: reg, cls)"),
            std::string::npos)
      << msg;
  bad = fit;
  bad.output_sample_weights = {w1()};
  msg = error_of([&] { a.fit(d.xs(), d.ys(), bad); });
  EXPECT_NE(msg.find("output_sample_weights has 1 entries but model 'two_headed' has 2 outputs"),
            std::string::npos)
      << msg;
  bad = fit;
  bad.output_sample_weights = {w1(), w2()};
  bad.sample_weight = w1();
  EXPECT_NE(error_of([&] { a.fit(d.xs(), d.ys(), bad); }).find("not both"), std::string::npos);
  bad = fit;
  bad.output_sample_weights = {w1(), Tensor::from_vector(Shape{3}, {1, 2, 3})};
  msg = error_of([&] { a.fit(d.xs(), d.ys(), bad); });
  EXPECT_NE(msg.find("the sample weights of output 'cls' has 3 weights but there are 8 samples"),
            std::string::npos)
      << msg;
}

TEST(MultiOutput, PerOutputWeightsInValidationDictsAndOnBatchCalls) {
  Data d;
  const TensorDict x{{"a", d.xa}, {"b", d.xb}}, y{{"reg", d.y1}, {"cls", d.y2}};
  // validation_data as dicts, with weights for one output (the other weighs 1).
  Model m = two_headed(keras_weighted_config());
  FitConfig cfg{.batch_size = 4, .epochs = 1, .verbose = 0, .shuffle = false};
  cfg.validation_data = ValidationData::dicts(x, y, {{"cls", w2()}});
  History h = m.fit(x, y, cfg);
  Logs after = m.evaluate(
      d.xs(), d.ys(), {.batch_size = 4, .verbose = 0, .sample_weight_by_output = {{"cls", w2()}}});
  for (auto& [name, value] : after) EXPECT_EQ(h.history.at("val_" + name).at(0), value) << name;
  // train_on_batch / test_on_batch take them as fit / evaluate do.
  Model a = two_headed(keras_weighted_config()), b = two_headed(keras_weighted_config());
  Logs on_batch = a.train_on_batch(d.xs(), d.ys(), {.output_sample_weights = {w1(), w2()}});
  FitConfig one{.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false};
  one.output_sample_weights = {w1(), w2()};
  History hb = b.fit(d.xs(), d.ys(), one);
  for (auto& [name, value] : on_batch) EXPECT_EQ(hb.history.at(name).at(0), value) << name;
  EXPECT_EQ(a.get_weights()[0].to_vector(), b.get_weights()[0].to_vector());
  const Logs tested =
      a.test_on_batch(d.xs(), d.ys(), {.sample_weight_by_output = {{"reg", w1()}, {"cls", w2()}}});
  EXPECT_EQ(tested,
            b.evaluate(d.xs(), d.ys(),
                       {.batch_size = 8, .verbose = 0, .output_sample_weights = {w1(), w2()}}));
  EXPECT_NE(tested.at("loss"), a.test_on_batch(d.xs(), d.ys()).at("loss"));
  auto msg = error_of([&] {
    m.fit(x, y, {.validation_data = ValidationData::dicts(x, {{"reg", d.y1}})});
  });
  EXPECT_NE(msg.find("y has no array for output 'cls'"), std::string::npos) << msg;
}
