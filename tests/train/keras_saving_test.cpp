// Keras configs and files: Network::get_config (Keras 3 functional / Sequential configs) and
// network_from_config rebuild the same model; .keras archives and .weights.h5 files round-trip
// predictions; a user layer registers itself; unsupported classes/options, wrong shapes and
// bad files are errors naming the layer / key / file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;

namespace {

std::string tmp(const std::string& file) {
  return (test_util::temp_dir("keras_saving", false) / file).string();
}

Tensor inputs(Shape s, uint64_t seed) { return test_util::lcg_inputs(s, seed); }
using test_util::max_abs_diff;

// Two Dense layers of one class (naming dense / dense_1), a branch, Add, Concatenate, BN.
Model functional_model() {
  KTensor in = Input({8, 8, 3}, "image");
  KTensor c = Conv2D(4, 3, {.padding = "same", .activation = "relu"})(in);
  KTensor b = BatchNormalization()(c);
  KTensor s = Add()({c, b});
  KTensor cat = Concatenate()({s, c});
  KTensor p = MaxPooling2D()(cat);
  KTensor f = Flatten()(p);
  KTensor d = Dropout(0.3)(Dense(16, {.activation = "relu"})(f));
  KTensor out = Dense(3, {.activation = "softmax"})(d);
  return Model(in, out, "branchy");
}

Model sequential_model() {
  return Sequential({Input({6, 6, 2}), DepthwiseConv2D({3, 3}, {.depth_multiplier = 2}),
                     SeparableConv2D(4, {3, 3}, {.padding = "same"}), GlobalAveragePooling2D(),
                     LayerNormalization(), Reshape({2, 2}), Flatten(), Rescaling(0.5, 0.1),
                     Activation("tanh"), Dense(2)});
}

// Gives every BatchNormalization non-trivial statistics, so their order is checked too.
void perturb_stats(Model& m) {
  for (auto& w : m.weights()) {
    Tensor t = inputs(w->value.shape(), w->name.size());
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data<float>()[i] = std::abs(t.data<float>()[i]) + 0.5f;
    if (w->name.find("moving") != std::string::npos || w->name.find("gamma") != std::string::npos)
      w->value.copy_from(t);
  }
}

template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(KerasConfig, SnakeCaseMatchesKeras) {
  EXPECT_EQ(keras_snake_case("Conv2D"), "conv2d");
  EXPECT_EQ(keras_snake_case("MaxPooling2D"), "max_pooling2d");
  EXPECT_EQ(keras_snake_case("GlobalAveragePooling2D"), "global_average_pooling2d");
  EXPECT_EQ(keras_snake_case("BatchNormalization"), "batch_normalization");
  EXPECT_EQ(keras_snake_case("InputLayer"), "input_layer");
  EXPECT_EQ(keras_snake_case("ReLU"), "re_lu");
}

TEST(KerasConfig, FunctionalConfigHasKerasStructureAndRoundTrips) {
  Model m = functional_model();
  json cfg = m.get_config();
  EXPECT_EQ(cfg["class_name"], "Functional");
  EXPECT_EQ(cfg["config"]["input_layers"], json::parse(R"([["image", 0, 0]])"));
  const json& layers = cfg["config"]["layers"];
  EXPECT_EQ(layers[0]["class_name"], "InputLayer");
  // Add's single node takes a list of two keras tensors.
  for (auto& l : layers)
    if (l["class_name"] == "Add") {
      const json& args = l["inbound_nodes"][0]["args"];
      ASSERT_EQ(args.size(), 1u);
      EXPECT_EQ(args[0].size(), 2u);
      EXPECT_EQ(args[0][0]["class_name"], "__keras_tensor__");
    }
  Model again = model_from_json(m.to_json());
  EXPECT_EQ(again.get_config(), cfg);
  perturb_stats(m);
  again.set_weights(m.get_weights());
  Tensor x = inputs({5, 8, 8, 3}, 1);
  EXPECT_EQ(max_abs_diff(m.predict(x), again.predict(x)), 0.0f);
}

TEST(KerasConfig, SequentialConfigRoundTrips) {
  Model m = sequential_model();
  json cfg = m.get_config();
  EXPECT_EQ(cfg["class_name"], "Sequential");
  EXPECT_EQ(cfg["config"]["layers"][0]["class_name"], "InputLayer");
  Model again = model_from_config(cfg);
  EXPECT_TRUE(again.is_sequential());
  EXPECT_EQ(again.get_config(), cfg);
}

TEST(KerasConfig, UnknownClassAndUnsupportedOptionNameLayerAndKey) {
  json cfg = functional_model().get_config();
  json bad = cfg;
  bad["config"]["layers"][1]["class_name"] = "Conv3D";
  std::string e = error_of([&] { network_from_config(bad); });
  EXPECT_NE(e.find("unknown layer class 'Conv3D'"), std::string::npos) << e;
  EXPECT_NE(e.find(cfg["config"]["layers"][1]["name"].get<std::string>()), std::string::npos) << e;
  bad = cfg;
  bad["config"]["layers"][1]["config"]["data_format"] = "channels_first";
  e = error_of([&] { network_from_config(bad); });
  EXPECT_NE(e.find("config key 'data_format'"), std::string::npos) << e;
  EXPECT_NE(e.find("Conv2D"), std::string::npos) << e;
  bad = cfg;
  bad["config"]["layers"][1]["config"]["activity_regularizer"] = {{"class_name", "L1"}};
  e = error_of([&] { network_from_config(bad); });
  EXPECT_NE(e.find("'activity_regularizer'"), std::string::npos) << e;
  bad = cfg;
  bad["config"]["layers"][1]["config"]["some_new_option"] = 3;
  e = error_of([&] { network_from_config(bad); });
  EXPECT_NE(e.find("'some_new_option'"), std::string::npos) << e;
}

namespace {
// A user layer: y = 2x, registered under its own class name.
class Doubler : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "Doubler"; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::scale_shift, {in[0]}, Attrs{{"scale", 2.0}, {"shift", 0.0}})};
  }
};
}  // namespace

TEST(KerasConfig, UserLayerRegistersItself) {
  register_layer("Doubler", [](const json& c) {
    KerasConfigReader r("Doubler", c);
    r.finish();
    return std::make_shared<Doubler>(r.name());
  });
  KTensor in = Input({3});
  KTensor out = LayerHandle(std::make_shared<Doubler>("twice"))(in);
  Model m(in, out);
  Model again = model_from_json(m.to_json());
  EXPECT_EQ(again.get_layer("twice")->class_name(), "Doubler");
  Tensor x = inputs({2, 3}, 3);
  EXPECT_EQ(max_abs_diff(m.predict(x), again.predict(x)), 0.0f);
}

TEST(KerasFiles, DotKerasRoundTripsPredictions) {
  for (Model* mp : {new Model(functional_model()), new Model(sequential_model())}) {
    std::unique_ptr<Model> m(mp);
    perturb_stats(*m);
    std::string path = tmp(m->name() + ".keras");
    m->save(path);
    Model loaded = load_model(path);
    EXPECT_EQ(loaded.get_config(), m->get_config());
    Shape s = m->inputs()[0].shape();
    s[0] = 4;
    Tensor x = inputs(s, 7);
    EXPECT_EQ(max_abs_diff(m->predict(x), loaded.predict(x)), 0.0f) << m->name();
  }
}

TEST(KerasFiles, WeightsH5UsesKerasLayoutAndRoundTrips) {
  Model m = functional_model();
  perturb_stats(m);
  std::string path = tmp("w.weights.h5");
  m.save_weights(path);
  std::set<std::string> names;
  for (auto& t : io::read_h5_tensors(path)) names.insert(t.name);
  for (auto* n :
       {"layers/conv2d/vars/0", "layers/conv2d/vars/1", "layers/batch_normalization/vars/3",
        "layers/dense/vars/0", "layers/dense_1/vars/1"})
    EXPECT_TRUE(names.count(n)) << n;
  Model other = functional_model();
  other.load_weights(path);
  Tensor x = inputs({3, 8, 8, 3}, 9);
  EXPECT_EQ(max_abs_diff(m.predict(x), other.predict(x)), 0.0f);
  // The checkpoint format is still chosen for other names.
  m.save_weights(tmp("w.ckpt"));
  other.load_weights(tmp("w.ckpt"));
}

TEST(KerasFiles, BadFilesNameTheFileAndThePart) {
  Model m = functional_model();
  std::string path = tmp("bad.keras");
  m.save(path);
  auto size = std::filesystem::file_size(path);
  std::filesystem::resize_file(path, size / 2);
  std::string e = error_of([&] { load_model(path); });
  EXPECT_NE(e.find(path), std::string::npos) << e;

  std::string txt = tmp("not.weights.h5");
  std::ofstream(txt) << "hello";
  e = error_of([&] { m.load_weights(txt); });
  EXPECT_NE(e.find("not an HDF5 file"), std::string::npos) << e;

  // Weights of the wrong shape: a model with wider Dense layers.
  KTensor in = Input({8, 8, 3});
  KTensor c = Conv2D(5, 3, {.padding = "same"})(in);
  Model wide(in, Dense(3)(Flatten()(c)));
  std::string w = tmp("wide.weights.h5");
  wide.save_weights(w);
  KTensor in2 = Input({8, 8, 3});
  Model narrow(in2, Dense(3)(Flatten()(Conv2D(4, 3, {.padding = "same"})(in2))));
  e = error_of([&] { narrow.load_weights(w); });
  EXPECT_NE(e.find("layers/conv2d/vars/0"), std::string::npos) << e;
  EXPECT_NE(e.find(w), std::string::npos) << e;
}

TEST(KerasConfig, AugmentationStackRoundTripsAndReadsKerasConfigs) {
  Model m =
      Sequential({Input({16, 16, 3}), Resizing(12, 12), RandomFlip("horizontal", 7),
                  RandomRotation(0.1), RandomZoom({-0.2, 0.1}), RandomTranslation(0.1, 0.2),
                  RandomBrightness(0.2), RandomCrop(10, 10), CenterCrop(8, 8), Flatten(), Dense(2)},
                 "augmented");
  Model again = model_from_config(m.get_config());
  EXPECT_EQ(again.get_config(), m.get_config());
  // Layer configs exactly as Keras 3.15 writes them.
  for (
      const char* text :
      {R"({"class_name": "RandomRotation", "config": {"name": "rr", "trainable": true, "data_format": "channels_last", "factor": [-0.1, 0.1], "fill_mode": "reflect", "fill_value": 0.0, "interpolation": "bilinear", "seed": null}})",
       R"({"class_name": "RandomZoom", "config": {"name": "rz", "trainable": true, "data_format": "channels_last", "height_factor": 0.1, "width_factor": null, "fill_mode": "reflect", "interpolation": "bilinear", "seed": null, "fill_value": 0.0}})",
       R"({"class_name": "RandomCrop", "config": {"name": "rc", "trainable": true, "data_format": "channels_last", "height": 4, "width": 4, "seed": 361625752}})",
       R"({"class_name": "Resizing", "config": {"name": "rs", "trainable": true, "data_format": "channels_last", "height": 4, "width": 4, "interpolation": "bilinear", "crop_to_aspect_ratio": false, "pad_to_aspect_ratio": false, "fill_mode": "constant", "fill_value": 0.0, "antialias": false}})"}) {
    LayerPtr l = layer_from_config(json::parse(text));
    EXPECT_EQ(l->class_name(), json::parse(text)["class_name"]);
  }
  std::string e = error_of([] {
    layer_from_config(json::parse(
        R"({"class_name": "Resizing", "config": {"name": "rs", "height": 4, "width": 4, "antialias": true}})"));
  });
  EXPECT_NE(e.find("Resizing 'rs': config key 'antialias'"), std::string::npos) << e;
}

TEST(KerasConfig, SharedLayerKeepsItsNodes) {
  KTensor a = Input({4}, "a");
  KTensor b = Input({4}, "b");
  LayerHandle shared = Dense(3, {.name = "shared"});
  KTensor out = Concatenate()({shared(a), shared(b)});
  Model m({a, b}, {out}, "siamese");
  json cfg = m.get_config();
  for (auto& l : cfg["config"]["layers"])
    if (l["name"] == "shared") EXPECT_EQ(l["inbound_nodes"].size(), 2u);
  std::string path = tmp("siamese.keras");
  m.save(path);
  Model again = load_model(path);
  EXPECT_EQ(again.get_config(), cfg);
  EXPECT_EQ(again.get_layer("shared")->weights().size(), 2u);
}
