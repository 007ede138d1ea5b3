// KerasHub's layers without Python (issue 36; keras_hub_interop checks them against keras-hub):
// the configs they load, the errors a bad config gets (naming the layer and the field), a
// KerasHub class Lockstep does not have (named, tokenizers told why), Lockstep's own save and
// load of them under their registered names, the backbones' parameter counts (keras-hub's), and
// a tiny TransformerEncoder classifier that learns.
#include "lockstep/nn/keras_hub.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "lockstep/io/keras_file.h"
#include "lockstep/nn/config.h"
#include "lockstep/nn/layers.h"
#include "lockstep/nn/layers_1d.h"
#include "lockstep/nn/mixed_precision.h"
#include "lockstep/saving/saving.h"
#include "lockstep/trainers/model.h"
#include "test_util.h"
#ifdef LOCKSTEP_XLA
#include "backends/xla_test_util.h"
#endif

using namespace lockstep;
using lockstep::test_util::expect_has;
namespace L = lockstep::layers;
namespace H = lockstep::keras_hub;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

json hub_entry(const std::string& cls, json config) {
  return {{"module", "keras_hub.src.layers.modeling.x"},
          {"class_name", cls},
          {"config", std::move(config)},
          {"registered_name", "keras_hub>" + cls}};
}

json encoder_config() {
  return {{"name", "enc"},
          {"trainable", true},
          {"intermediate_dim", 16},
          {"num_heads", 2},
          {"dropout", 0.0},
          {"activation", "relu"},
          {"layer_norm_epsilon", 1e-5},
          {"normalize_first", false}};
}

}  // namespace

TEST(KerasHubLayers, LoadUnderTheirRegisteredNames) {
  for (const char* cls : {"PositionEmbedding", "ReversibleEmbedding", "TokenAndPositionEmbedding",
                          "SinePositionEncoding", "RotaryEmbedding", "TransformerEncoder",
                          "TransformerDecoder", "BertBackbone", "GPT2Backbone"})
    EXPECT_TRUE(is_layer_registered(std::string("keras_hub>") + cls)) << cls;
  LayerPtr l = layer_from_config(hub_entry("TransformerEncoder", encoder_config()));
  EXPECT_EQ(l->class_name(), "TransformerEncoder");
  EXPECT_EQ(l->name(), "enc");
  // KerasHub's initializers that Lockstep cannot build exactly load (their weights come from the
  // file) and are written back as they were.
  json c = encoder_config();
  c["kernel_initializer"] = {{"module", "keras.initializers"},
                             {"class_name", "TruncatedNormal"},
                             {"config", {{"mean", 0.0}, {"stddev", 0.02}, {"seed", nullptr}}},
                             {"registered_name", nullptr}};
  LayerPtr t = layer_from_config(hub_entry("TransformerEncoder", c));
  EXPECT_EQ(t->config()["kernel_initializer"], c["kernel_initializer"]);
}

TEST(KerasHubLayers, BadConfigsNameTheLayerAndTheField) {
  json c = encoder_config();
  c["num_heads"] = 0;
  expect_has(error_of([&] { layer_from_config(hub_entry("TransformerEncoder", c)); }),
             {"TransformerEncoder 'enc'", "num_heads must be positive"});
  c = encoder_config();
  c["activation"] = "swishy";
  expect_has(error_of([&] { layer_from_config(hub_entry("TransformerEncoder", c)); }),
             {"TransformerEncoder 'enc'", "'activation'", "swishy"});
  c = encoder_config();
  c["attention_bias"] = true;
  expect_has(error_of([&] { layer_from_config(hub_entry("TransformerEncoder", c)); }),
             {"TransformerEncoder 'enc'", "'attention_bias'", "not an option"});
  expect_has(
      error_of([&] {
        layer_from_config(hub_entry("RotaryEmbedding", {{"name", "rope"}, {"rope_type", "yarn"}}));
      }),
      {"RotaryEmbedding 'rope'", "rope_type 'yarn'"});
  expect_has(error_of([&] {
               layer_from_config(
                   hub_entry("PositionEmbedding", {{"name", "pos"}, {"sequence_length", -3}}));
             }),
             {"PositionEmbedding 'pos'", "sequence_length must be a positive integer"});
  expect_has(
      error_of([&] {
        layer_from_config(hub_entry(
            "ReversibleEmbedding",
            {{"name", "rev"}, {"input_dim", 10}, {"output_dim", 4}, {"logit_soft_cap", "big"}}));
      }),
      {"ReversibleEmbedding 'rev'", "'logit_soft_cap'"});
  expect_has(error_of([&] {
               keras_hub::BertBackboneOptions o{.vocabulary_size = 10,
                                                .num_layers = 1,
                                                .num_heads = 2,
                                                .hidden_dim = 8,
                                                .intermediate_dim = 16,
                                                .max_sequence_length = 8,
                                                .sequence_length = 9};
               H::BertBackbone(o);
             }),
             {"BertBackbone", "sequence_length 9", "max_sequence_length = 8"});
}

TEST(KerasHubLayers, UnknownKerasHubClassesAreRefusedByName) {
  expect_has(error_of([&] {
               layer_from_config(hub_entry("MaskedLMHead", {{"name", "head"}}));
             }),
             {"layer 'head'", "KerasHub class 'MaskedLMHead'", "keras_hub>MaskedLMHead",
              "not supported", "TransformerEncoder"});
  expect_has(error_of([&] {
               layer_from_config(hub_entry("BertTokenizer", {{"name", "tok"}}));
             }),
             {"KerasHub class 'BertTokenizer'", "vocabulary", "tokenize outside Lockstep"});
  // A whole task model (a backbone plus a preprocessor and a head) is refused by its class.
  json task = {{"module", "keras_hub.src.models.bert.bert_text_classifier"},
               {"class_name", "BertTextClassifier"},
               {"registered_name", "keras_hub>BertTextClassifier"},
               {"config", {{"name", "classifier"}}}};
  expect_has(error_of([&] { network_from_config(task); }),
             {"KerasHub class 'BertTextClassifier'", "not supported"});
  // A call argument the layer does not take names the layer and the argument.
  json model = {{"class_name", "Functional"},
                {"config",
                 {{"name", "m"},
                  {"layers",
                   {{{"class_name", "InputLayer"},
                     {"name", "x"},
                     {"config", {{"name", "x"}, {"batch_shape", {nullptr, 4, 8}}}},
                     {"inbound_nodes", json::array()}},
                    {{"module", "keras_hub.src.layers.modeling.transformer_encoder"},
                     {"class_name", "TransformerEncoder"},
                     {"registered_name", "keras_hub>TransformerEncoder"},
                     {"name", "enc"},
                     {"config", encoder_config()},
                     {"inbound_nodes",
                      {{{"args",
                         {{{"class_name", "__keras_tensor__"},
                           {"config", {{"keras_history", {"x", 0, 0}}}}}}},
                        {"kwargs", {{"return_attention_scores", true}}}}}}}}},
                  {"input_layers", {"x", 0, 0}},
                  {"output_layers", {"enc", 0, 0}}}}};
  expect_has(error_of([&] { network_from_config(model); }),
             {"TransformerEncoder 'enc'", "'return_attention_scores'", "not supported"});
}

// Lockstep's own model with KerasHub's layers: saved under their registered names and sublayer
// paths, loaded back with the same predictions.
TEST(KerasHubLayers, SaveAndLoadRoundTrip) {
  reset_layer_names();
  auto ids = L::Input({6}, "token_ids", DType::i32);
  auto x = H::TokenAndPositionEmbedding(12, 8, 8, {.tie_weights = false, .name = "tpe"})(ids);
  x = H::RotaryEmbedding({.name = "rope"})(x);
  x = H::TransformerEncoder(16, 2, {.normalize_first = true, .name = "enc"})(x);
  x = H::TransformerDecoder(16, 2, {.name = "dec"})(x);
  Model m(ids, L::Dense(3, {.name = "head"})(L::GlobalAveragePooling1D()(x)));
  m.compile({.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse")});
  const Tensor in = Tensor::from_vector_i32({2, 6}, {1, 2, 3, 4, 5, 6, 11, 0, 7, 7, 3, 9});
  const Tensor want = m.predict(in, 2);
  const json cfg = m.get_config();
  bool found = false;
  for (auto& l : cfg["config"]["layers"])
    if (l["class_name"] == "TransformerEncoder") {
      found = true;
      EXPECT_EQ(l["registered_name"], "keras_hub>TransformerEncoder");
      EXPECT_EQ(l["module"], "keras_hub.src.layers.modeling.transformer_encoder");
    }
  EXPECT_TRUE(found);
  const std::string path = (test_util::temp_dir("keras_hub_roundtrip", true) / "m.keras").string();
  m.save(path);
  Model again = load_model(path, /*compile=*/false);
  again.compile({.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse")});
  EXPECT_LE(test_util::max_abs_diff(again.predict(in, 2), want), 1e-6f);
}

TEST(KerasHubBackbones, ParameterCountsAreKerasHubs) {
  // keras-hub 0.32: BertBackbone / GPT2Backbone(vocabulary 100, 2 layers, 2 heads, hidden 32,
  // intermediate 64, max sequence 32).count_params() = 22496 / 21376.
  Network bert = H::BertBackbone({.vocabulary_size = 100,
                                  .num_layers = 2,
                                  .num_heads = 2,
                                  .hidden_dim = 32,
                                  .intermediate_dim = 64,
                                  .max_sequence_length = 32});
  EXPECT_EQ(bert.count_params(), 22496);
  EXPECT_EQ(bert.get_config()["registered_name"], "keras_hub>BertBackbone");
  Network gpt2 = H::GPT2Backbone({.vocabulary_size = 100,
                                  .num_layers = 2,
                                  .num_heads = 2,
                                  .hidden_dim = 32,
                                  .intermediate_dim = 64,
                                  .max_sequence_length = 32,
                                  .sequence_length = 16});
  EXPECT_EQ(gpt2.count_params(), 21376);
  EXPECT_EQ(gpt2.inputs().at(0).shape(), Shape({-1, 16}));
  EXPECT_EQ(gpt2.get_config()["config"]["max_sequence_length"], 32);
}

// A tiny TransformerEncoder classifier learns whether token 1 outnumbers token 2.
TEST(KerasHubTraining, TransformerEncoderClassifierLossFalls) {
  reset_layer_names();
  set_random_seed(5);
  constexpr int64_t kN = 256, kT = 8;
  std::vector<int32_t> ids(static_cast<size_t>(kN * kT));
  std::vector<float> labels(static_cast<size_t>(kN));
  uint64_t s = 12345;
  for (int64_t i = 0; i < kN; ++i) {
    int ones = 0, twos = 0;
    for (int64_t t = 0; t < kT; ++t) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      const int32_t v = int32_t((s >> 33) % 5);
      ids[size_t(i * kT + t)] = v;
      ones += v == 1;
      twos += v == 2;
    }
    labels[size_t(i)] = ones > twos ? 1.f : 0.f;
  }
  const Tensor x = Tensor::from_vector_i32({kN, kT}, ids), y = Tensor::from_vector({kN, 1}, labels);
  auto in = L::Input({kT}, "token_ids", DType::i32);
  auto h = H::TokenAndPositionEmbedding(5, kT, 16, {.name = "tpe"})(in);
  h = H::TransformerEncoder(32, 2, {.name = "enc"})(h);
  Model m(in, L::Dense(1, {.activation = "sigmoid"})(L::GlobalAveragePooling1D()(h)));
  m.compile({.optimizer = optimizers::Adam(3e-3), .loss = losses::get("binary_crossentropy")});
  const History hist = m.fit(x, y, {.batch_size = 32, .epochs = 15, .verbose = 0});
  const auto& loss = hist.history.at("loss");
  std::printf("TransformerEncoder classifier: loss %.4f -> %.4f\n", loss.front(), loss.back());
  EXPECT_LT(loss.back(), 0.6 * loss.front());
}

TEST(KerasHubTraining, PositionEmbeddingPassesGradientsToTheLayersBeforeIt) {
  // The table is broadcast to x's shape as zeros_like(x) + table, and zeros_like reads x's shape
  // alone: a trained layer in front of it (a ViT's patch embedding) trains.
  reset_layer_names();
  set_random_seed(2);
  auto in = L::Input({4, 3});
  auto h = L::Dense(8, {.name = "before"})(in);
  h = L::Add()({h, H::PositionEmbedding(4)(h)})[0];
  Model m(in, L::Dense(1)(L::Flatten()(h)));
  m.compile({.optimizer = optimizers::SGD(0.1), .loss = losses::get("mse")});
  const Tensor before = m.get_layer("before")->weights()[0]->value.clone();
  m.train_on_batch(Tensor::full({2, 4, 3}, 1.f), Tensor::full({2, 1}, 1.f));
  const Tensor after = m.get_layer("before")->weights()[0]->value;
  double moved = 0;
  for (int64_t i = 0; i < after.numel(); ++i)
    moved += std::fabs(after.data<float>()[i] - before.data<float>()[i]);
  EXPECT_GT(moved, 1e-4);
}

// A .keras file with a KerasHub class Lockstep does not have: the error names the file too.
TEST(KerasHubLayers, AnUnknownKerasHubLayerInAFileNamesTheFileAndTheClass) {
  reset_layer_names();
  auto x = L::Input({4, 8}, "x");
  Model m(x, H::TransformerEncoder(16, 2, {.name = "enc"})(x));
  const std::string path = (test_util::temp_dir("keras_hub_unknown", true) / "m.keras").string();
  m.save(path);
  io::KerasArchive a = io::read_keras_archive(path);
  for (auto& l : a.config["config"]["layers"])
    if (l["class_name"] == "TransformerEncoder") {
      l["class_name"] = "FNetEncoder";
      l["registered_name"] = "keras_hub>FNetEncoder";
    }
  io::write_keras_archive(path, a);
  expect_has(error_of([&] { load_model(path, false); }),
             {path, "config.json", "KerasHub class 'FNetEncoder'", "not supported"});
}

// Under mixed_bfloat16 the KerasHub layers compute in bfloat16 (softmax and layer norms in
// float32) and stay close to float32.
TEST(KerasHubLayers, MixedBfloat16StaysCloseToFloat32) {
  auto build = [] {
    reset_layer_names();
    set_random_seed(9);
    auto ids = L::Input({6}, "token_ids", DType::i32);
    auto h = H::TokenAndPositionEmbedding(12, 6, 8, {.name = "tpe"})(ids);
    h = H::SinePositionEncoding(10000, "sine")(h);
    h = H::TransformerDecoder(16, 2, {.normalize_first = true, .name = "dec"})(h);
    return Model(ids, H::RotaryEmbedding({.name = "rope"})(h));
  };
  const Tensor in = Tensor::from_vector_i32({2, 6}, {1, 2, 3, 4, 5, 6, 11, 0, 7, 7, 3, 9});
  Model f32 = build();
  f32.compile({.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse")});
  const Tensor want = f32.predict(in, 2);
  mixed_precision::set_global_policy("mixed_bfloat16");
  Model bf16 = build();
  mixed_precision::set_global_policy("float32");
  bf16.set_weights(f32.get_weights());
  bf16.compile({.optimizer = optimizers::Adam(1e-3), .loss = losses::get("mse")});
  const auto got = bf16.predict(in, 2).to_vector(), w = want.to_vector();
  ASSERT_EQ(got.size(), w.size());
  float d = 0;
  for (size_t i = 0; i < w.size(); ++i) d = std::max(d, std::abs(got[i] - w[i]));
  std::printf("mixed_bfloat16 against float32: max abs diff %.3g\n", d);
  EXPECT_LE(d, 0.1f);
  EXPECT_GT(d, 0.f);  // it did compute in bfloat16
}

#ifdef LOCKSTEP_XLA
// The KerasHub layers' graphs lower to XLA: a tiny encoder-decoder trains on xla as on cpu.
TEST(KerasHubLayers, TheXlaBackendTrainsAndPredictsAsCpu) {
  auto client = XLA_CLIENT_OR_SKIP();
  auto build = [] {
    reset_layer_names();
    set_random_seed(4);
    auto ids = L::Input({6}, "token_ids", DType::i32);
    auto h = H::TokenAndPositionEmbedding(12, 6, 8, {.mask_zero = true, .name = "tpe"})(ids);
    auto enc = H::TransformerEncoder(16, 2, {.name = "enc"})(h);
    auto dec = H::TransformerDecoder(16, 2, {.normalize_first = true, .name = "dec"})({h, enc});
    return Model(ids, L::Dense(1)(L::GlobalAveragePooling1D()(dec)));
  };
  const Tensor x = Tensor::from_vector_i32({4, 6}, {1, 2, 3, 4, 5, 6, 11, 2, 7, 7, 3, 0,  //
                                                    3, 3, 3, 1, 0, 0, 9,  8, 7, 6, 5, 4});
  const Tensor y = Tensor::from_vector({4, 1}, {0.5f, -0.2f, 0.1f, 0.9f});
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<float>> preds;
  for (const char* backend : {"cpu", "xla"}) {
    Model m = build();
    m.compile(
        {.optimizer = optimizers::Adam(1e-2), .loss = losses::get("mse"), .backend = backend});
    losses.push_back(m.fit(x, y, {.batch_size = 4, .epochs = 5, .verbose = 0}).history["loss"]);
    preds.push_back(m.predict(x, 4).to_vector());
  }
  for (size_t i = 0; i < losses[0].size(); ++i)
    EXPECT_NEAR(losses[0][i], losses[1][i], 1e-4 * (1 + losses[0][i])) << "epoch " << i;
  for (size_t i = 0; i < preds[0].size(); ++i)
    EXPECT_NEAR(preds[0][i], preds[1][i], 1e-4 * (1 + std::abs(preds[0][i])));
}
#endif
