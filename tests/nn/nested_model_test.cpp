// Nested models (Network::as_layer): a Sequential or functional model used as a layer of another
// model predicts exactly like the same layers called flat, shares its variables with the inner
// model (training the outer model trains them; a frozen nested model freezes them), and its
// Keras config (class_name "Sequential" / "Functional") and .keras file (weights under
// layers/<nested>/layers/...) round-trip. Keras itself reads and writes these files in
// tests/interop (KerasInterop).
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;

namespace {

Tensor inputs(Shape s, uint64_t seed) { return test_util::lcg_inputs(s, seed); }
using test_util::max_abs_diff;

struct Nested {
  LayerPtr d1, d2, fd, head;  // the layers, for the flat reference
  Model inner_seq, inner_fn, outer;
};

// outer (functional): x -> inner_seq (Dense 5 relu, Dense 3) -> inner_fn (Dense 4 tanh) -> Dense 2
Nested nested_model() {
  Nested n;
  n.d1 = Dense(5, {.activation = "relu"});
  n.d2 = Dense(3);
  n.inner_seq = Sequential({Input({6}), n.d1, n.d2}, "inner_seq");
  KTensor fi = Input({3});
  n.fd = Dense(4, {.activation = "tanh"});
  n.inner_fn = Model(fi, (*n.fd)(fi), "inner_fn");
  n.head = Dense(2);
  KTensor x = Input({6}, "x");
  KTensor h = n.inner_fn(n.inner_seq(x));
  n.outer = Model(x, (*n.head)(h), "outer");
  return n;
}

}  // namespace

TEST(NestedModel, PredictsLikeTheSameLayersCalledFlat) {
  Nested n = nested_model();
  Model flat = Sequential({Input({6}), n.d1, n.d2, n.fd, n.head}, "flat");
  Tensor x = inputs(Shape{7, 6}, 3);
  EXPECT_EQ(max_abs_diff(n.outer.predict(x), flat.predict(x)), 0.0f);
  // Variables are shared, in Keras's order: the nested models' layers where they sit.
  auto w = n.outer.weights();
  ASSERT_EQ(w.size(), 8u);
  EXPECT_EQ(w[0], n.d1->weights()[0]);
  EXPECT_EQ(w[3], n.d2->weights()[1]);
  EXPECT_EQ(w[4], n.fd->weights()[0]);
  EXPECT_EQ(w[7], n.head->weights()[1]);
  EXPECT_EQ(n.outer.count_params(), (6 * 5 + 5) + (5 * 3 + 3) + (3 * 4 + 4) + (4 * 2 + 2));
  EXPECT_EQ(n.outer.get_layer("inner_seq")->class_name(), "Sequential");
  EXPECT_EQ(n.outer.get_layer("inner_fn")->class_name(), "Functional");
  EXPECT_EQ(n.inner_seq.as_layer(), n.outer.get_layer("inner_seq"));  // one layer per network
}

TEST(NestedModel, TrainingTrainsTheInnerWeightsUnlessFrozen) {
  Nested n = nested_model();
  Tensor x = inputs(Shape{32, 6}, 5);
  Tensor y = Tensor::zeros(Shape{32}, DType::i32);
  for (int64_t i = 0; i < 32; ++i) y.data<int32_t>()[i] = int32_t(i % 2);
  auto before = n.inner_seq.get_weights();
  n.inner_fn.as_layer()->trainable = false;  // transfer learning: freeze one nested model
  EXPECT_EQ(n.outer.trainable_weights().size(), 6u);
  auto frozen = n.inner_fn.get_weights();
  n.outer.compile({.optimizer = optimizers::Adam(0.05),
                   .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
  n.outer.fit(x, y, {.batch_size = 8, .epochs = 2, .verbose = 0});
  auto after = n.inner_seq.get_weights();
  for (size_t i = 0; i < after.size(); ++i)
    EXPECT_GT(max_abs_diff(before[i], after[i]), 1e-4f) << "inner_seq weight " << i;
  auto still = n.inner_fn.get_weights();
  for (size_t i = 0; i < still.size(); ++i)
    EXPECT_EQ(max_abs_diff(frozen[i], still[i]), 0.0f) << "frozen inner_fn weight " << i;
  // The inner model predicts with the trained weights by itself.
  Model flat = Sequential({Input({6}), n.d1, n.d2});
  EXPECT_EQ(max_abs_diff(n.inner_seq.predict(x), flat.predict(x)), 0.0f);
}

TEST(NestedModel, ConfigRoundTripsAsKerasWritesIt) {
  Nested n = nested_model();
  json cfg = n.outer.get_config();
  const json& layers = cfg["config"]["layers"];
  ASSERT_EQ(layers.size(), 4u);  // x, inner_seq, inner_fn, head
  EXPECT_EQ(layers[1]["class_name"], "Sequential");
  EXPECT_EQ(layers[1]["module"], "keras");
  EXPECT_EQ(layers[1]["name"], "inner_seq");
  EXPECT_EQ(layers[1]["config"]["layers"].size(), 3u);  // InputLayer, 2 x Dense
  EXPECT_EQ(layers[2]["class_name"], "Functional");
  EXPECT_EQ(layers[2]["module"], "keras.src.models.functional");
  EXPECT_FALSE(layers[2]["config"].contains("dtype"));
  EXPECT_EQ(layers[2]["inbound_nodes"][0]["args"][0]["config"]["keras_history"][0], "inner_seq");
  Model back = model_from_config(cfg);
  EXPECT_EQ(back.get_config(), cfg);
  back.set_weights(n.outer.get_weights());
  Tensor x = inputs(Shape{5, 6}, 9);
  EXPECT_EQ(max_abs_diff(back.predict(x), n.outer.predict(x)), 0.0f);
  // A functional model nested in a Sequential, through JSON.
  Model seq = Sequential({Input({6}), n.inner_seq, n.inner_fn, Dense(1)}, "outer_seq");
  Model seq_back = model_from_json(seq.to_json());
  EXPECT_EQ(seq_back.get_config(), seq.get_config());
  EXPECT_EQ(seq_back.get_layer("inner_fn")->class_name(), "Functional");
  EXPECT_EQ(seq_back.count_params(), seq.count_params());
}

TEST(NestedModel, DotKerasUsesKerasNestedLayoutAndRoundTrips) {
  Nested n = nested_model();
  for (auto& w : n.outer.weights()) w->value.copy_from(inputs(w->value.shape(), w->name.size()));
  const std::string path = (test_util::temp_dir("nested_model", false) / "outer.keras").string();
  n.outer.save(path);
  std::set<std::string> names;
  for (auto& t : io::read_keras_archive(path).weights) names.insert(t.name);
  for (const char* want :
       {"layers/sequential/layers/dense/vars/0", "layers/sequential/layers/dense_1/vars/1",
        "layers/functional/layers/dense/vars/0", "layers/dense/vars/1"})
    EXPECT_TRUE(names.count(want)) << want;
  EXPECT_EQ(names.size(), 8u);
  Model back = load_model(path);
  Tensor x = inputs(Shape{4, 6}, 11);
  EXPECT_EQ(max_abs_diff(back.predict(x), n.outer.predict(x)), 0.0f);
  // .weights.h5 too, into a model built from the config.
  const std::string wpath = (test_util::temp_dir("nested_model", false) / "o.weights.h5").string();
  n.outer.save_weights(wpath);
  Model fresh = model_from_config(n.outer.get_config());
  fresh.load_weights(wpath);
  EXPECT_EQ(max_abs_diff(fresh.predict(x), n.outer.predict(x)), 0.0f);
}

TEST(NestedModel, WrongInputShapeNamesTheNestedModel) {
  Nested n = nested_model();
  KTensor bad = Input({5});
  try {
    n.inner_seq(bad);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inner_seq"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nested model takes"), std::string::npos) << e.what();
  }
}

// tests/fuzz/regressions/keras_config: a __keras_tensor__ without "keras_history" was read with
// const operator[] (undefined behaviour, a use-after-free under ASan); now a named error.
TEST(KerasConfigFuzzRegression, KerasTensorWithoutHistoryIsAnError) {
  Nested n = nested_model();
  std::string text = n.outer.to_json();
  const size_t at = text.find("\"keras_history\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 15, "\"feras_history\"");
  try {
    model_from_json(text);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("keras_history"), std::string::npos) << e.what();
  }
}

// tests/fuzz/regressions/keras_file: a .keras whose members fail their zip CRC went on to the
// parsers (HDF5 leaked on the garbage); the reader now checks each member's CRC itself.
TEST(KerasFileFuzzRegression, CorruptMemberIsACrcError) {
  const std::string path = std::string(LOCKSTEP_SOURCE_DIR) +
                           "/tests/fuzz/regressions/keras_file/corrupt_weights_member_crc.keras";
  try {
    load_model(path);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CRC mismatch"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt in the zip"), std::string::npos) << e.what();
  }
}
