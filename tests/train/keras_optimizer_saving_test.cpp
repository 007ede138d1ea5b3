// include_optimizer: model.save("m.keras") writes Keras's compile_config and the optimizer's
// variables (optimizer/vars/<i>: iteration, learning_rate, slots in Keras's order), and
// load_model returns a compiled model whose training resumes exactly: 2 epochs in one go equal
// 1 epoch, save, load, 1 more epoch. Bad optimizer parts are errors naming the file.
#include <gtest/gtest.h>

#include <filesystem>

#include "lockstep/io/keras_file.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;
using test_util::error_of;

namespace {

std::string tmp(const std::string& file) {
  return (test_util::temp_dir("keras_optimizer_saving", false) / file).string();
}

std::pair<Tensor, Tensor> make_data(int64_t n) {
  std::vector<float> x(size_t(n * 6));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 37) % 19) / 9.0f - 1.0f;
  Tensor y = Tensor::zeros(Shape{n}, DType::i32);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = int32_t((i * 5) % 4);
  return {Tensor::from_vector(Shape{n, 6}, x), y};
}

Model make_model(OptimizerPtr opt) {
  Model m =
      Sequential({Input({6}), Dense(10, {.activation = "relu"}), BatchNormalization(), Dense(4)});
  m.compile({.optimizer = std::move(opt),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

float max_weight_diff(const Model& a, const Model& b) {
  auto wa = a.get_weights(), wb = b.get_weights();
  EXPECT_EQ(wa.size(), wb.size());
  float d = 0;
  for (size_t i = 0; i < wa.size(); ++i) {
    auto va = wa[i].to_vector(), vb = wb[i].to_vector();
    for (size_t k = 0; k < va.size(); ++k) d = std::max(d, std::abs(va[k] - vb[k]));
  }
  return d;
}

struct OptCase {
  const char* name;
  std::function<OptimizerPtr()> make;
};

}  // namespace

TEST(KerasOptimizerSaving, TrainingResumesExactlyFromALoadedFile) {
  auto [x, y] = make_data(48);
  const FitConfig fit{.batch_size = 8, .epochs = 1, .verbose = 0, .shuffle = false};
  std::vector<OptCase> cases = {
      {"adam", [] { return optimizers::Adam(0.01); }},
      {"adamw", [] { return optimizers::AdamW(0.01, 0.01); }},
      {"sgd_momentum", [] { return optimizers::SGD(0.05, 0.9, true); }},
      {"rmsprop_momentum", [] { return optimizers::RMSprop(0.01, 0.9, 0.5); }},
      {"adam_schedule",
       [] {
         return optimizers::Adam(0, 0.9, 0.999, 1e-7,
                                 {.schedule = schedules::ExponentialDecay(0.02, 3, 0.5)});
       }},
  };
  for (auto& c : cases) {
    Model straight = make_model(c.make());
    Model resumed = make_model(c.make());
    resumed.set_weights(straight.get_weights());
    FitConfig two = fit;
    two.epochs = 2;
    straight.fit(x, y, two);
    resumed.fit(x, y, fit);
    const std::string path = tmp(std::string(c.name) + ".keras");
    resumed.save(path);
    Model loaded = load_model(path);
    ASSERT_TRUE(loaded.compile_config().optimizer) << c.name;
    EXPECT_EQ(loaded.compile_config().optimizer->name(),
              resumed.compile_config().optimizer->name());
    EXPECT_EQ(loaded.compile_config().optimizer->iterations()->value.item(), 6.0f) << c.name;
    loaded.fit(x, y, fit);
    const float d = max_weight_diff(straight, loaded);
    EXPECT_LE(d, 2e-6f) << c.name;
    // Control: the same weights with a fresh optimizer end elsewhere (the state matters).
    Model control = load_model(path, /*compile=*/false);
    control.compile({.optimizer = c.make(),
                     .loss = losses::SparseCategoricalCrossentropy({.from_logits = true})});
    control.fit(x, y, fit);
    EXPECT_GT(max_weight_diff(straight, control), 1e-4f) << c.name;
  }
}

TEST(KerasOptimizerSaving, WritesKerasCompileConfigAndOptimizerVars) {
  auto [x, y] = make_data(16);
  Model m = make_model(optimizers::Adam(0.005));
  m.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
  const std::string path = tmp("layout.keras");
  m.save(path);
  io::KerasArchive a = io::read_keras_archive(path);
  const json& cc = a.config.at("compile_config");
  EXPECT_EQ(cc["optimizer"]["class_name"], "Adam");
  EXPECT_EQ(cc["optimizer"]["module"], "keras.optimizers");
  EXPECT_DOUBLE_EQ(cc["optimizer"]["config"]["learning_rate"].get<double>(), 0.005);
  EXPECT_EQ(cc["loss"]["class_name"], "SparseCategoricalCrossentropy");
  EXPECT_EQ(cc["loss"]["config"]["from_logits"], true);
  EXPECT_EQ(cc["metrics"], json::array({"accuracy"}));
  std::map<std::string, Tensor> t;
  for (auto& n : a.weights) t[n.name] = n.value;
  // iteration (2 steps), learning_rate, then (m, v) for dense kernel, bias, BN gamma, beta,
  // dense_1 kernel, bias: 2 + 12 variables, as Keras writes them.
  ASSERT_TRUE(t.count("optimizer/vars/0"));
  EXPECT_EQ(t["optimizer/vars/0"].dtype(), DType::i64);
  EXPECT_EQ(t["optimizer/vars/0"].data<int64_t>()[0], 2);
  EXPECT_FLOAT_EQ(t["optimizer/vars/1"].item(), 0.005f);
  EXPECT_EQ(t["optimizer/vars/2"].shape(), (Shape{6, 10}));
  EXPECT_EQ(t["optimizer/vars/3"].shape(), (Shape{6, 10}));
  EXPECT_EQ(t["optimizer/vars/4"].shape(), (Shape{10}));
  EXPECT_EQ(t["optimizer/vars/12"].shape(), (Shape{4}));
  EXPECT_TRUE(t.count("optimizer/vars/13"));
  EXPECT_FALSE(t.count("optimizer/vars/14"));
  // include_optimizer = false: compile_config null (as Keras writes for an uncompiled model),
  // no optimizer group; loads uncompiled.
  save_model(m, tmp("plain.keras"), {.include_optimizer = false});
  EXPECT_TRUE(
      io::read_keras_archive(tmp("plain.keras")).config.value("compile_config", json()).is_null());
  EXPECT_FALSE(load_model(tmp("plain.keras")).compile_config().optimizer);
  // An uncompiled model: compile_config null too.
  Model u = Sequential({Input({3}), Dense(2)});
  u.save(tmp("uncompiled.keras"));
  EXPECT_TRUE(io::read_keras_archive(tmp("uncompiled.keras"))
                  .config.value("compile_config", json())
                  .is_null());
}

TEST(KerasOptimizerSaving, BadOptimizerPartsNameTheFile) {
  auto [x, y] = make_data(16);
  Model m = make_model(optimizers::Adam(0.005));
  m.fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = 0});
  const std::string good = tmp("good.keras");
  m.save(good);
  io::KerasArchive a = io::read_keras_archive(good);
  // One slot missing.
  io::KerasArchive missing = a;
  missing.weights.erase(std::remove_if(missing.weights.begin(), missing.weights.end(),
                                       [](auto& t) { return t.name == "optimizer/vars/13"; }),
                        missing.weights.end());
  io::write_keras_archive(tmp("missing.keras"), missing);
  auto e = error_of([&] { load_model(tmp("missing.keras")); });
  EXPECT_NE(e.find("missing.keras"), std::string::npos) << e;
  EXPECT_NE(e.find("optimizer/vars holds 13 variables"), std::string::npos) << e;
  // An optimizer option Lockstep lacks; compile = false still loads the model.
  io::KerasArchive ams = a;
  ams.config["compile_config"]["optimizer"]["config"]["amsgrad"] = true;
  io::write_keras_archive(tmp("amsgrad.keras"), ams);
  e = error_of([&] { load_model(tmp("amsgrad.keras")); });
  EXPECT_NE(e.find("amsgrad.keras"), std::string::npos) << e;
  EXPECT_NE(e.find("'amsgrad' = true is not supported"), std::string::npos) << e;
  Model plain = load_model(tmp("amsgrad.keras"), /*compile=*/false);
  EXPECT_FALSE(plain.compile_config().optimizer);
  // An unknown optimizer class.
  io::KerasArchive lion = a;
  lion.config["compile_config"]["optimizer"]["class_name"] = "Lion";
  io::write_keras_archive(tmp("lion.keras"), lion);
  e = error_of([&] { load_model(tmp("lion.keras")); });
  EXPECT_NE(e.find("unknown optimizer class 'Lion'"), std::string::npos) << e;
}
