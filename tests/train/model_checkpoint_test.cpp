// ModelCheckpoint (keras.callbacks.ModelCheckpoint): file names formatted as Python's
// str.format (known values from CPython), which epochs save under save_best_only / mode /
// initial_value_threshold, batch-level save_freq, Keras's errors, and files that load back with
// identical predictions.
#include <gtest/gtest.h>

#include <filesystem>

#include "callbacks/python_format.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;
using test_util::error_of;

namespace {

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

Model small_model() {
  Model m = Sequential({Input({4}), Dense(8, {.activation = "relu"}), Dense(3)});
  m.compile({.optimizer = optimizers::Adam(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

std::pair<Tensor, Tensor> small_data(int64_t n) {
  std::vector<float> x(size_t(n * 4));
  std::vector<int32_t> y(static_cast<size_t>(n) + 0);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) x[size_t(i * 4 + j)] = float((i * 7 + j * 3) % 11) / 10.0f - 0.5f;
    y[size_t(i)] = int32_t(i % 3);
  }
  Tensor yt = Tensor::zeros(Shape{n}, DType::i32);
  std::copy(y.begin(), y.end(), yt.data<int32_t>());
  return {Tensor::from_vector(Shape{n, 4}, x), yt};
}

// Drives a callback through epochs with the given monitored values; returns the files written.
std::vector<std::string> run_epochs(const fs::path& dir, const std::string& pattern,
                                    ModelCheckpointOptions o, const std::string& key,
                                    const std::vector<double>& values, bool fresh = true) {
  if (fresh) fs::remove_all(dir);
  Model m = small_model();
  auto cb = callbacks::ModelCheckpoint((dir / pattern).string(), o);
  cb->set_model(&m);
  cb->on_train_begin({});
  for (size_t e = 0; e < values.size(); ++e) {
    cb->on_epoch_begin(int(e), {});
    cb->on_epoch_end(int(e), {{key, values[e]}, {"loss", 1.0}});
  }
  return files_in(dir);
}

}  // namespace

TEST(PythonFormat, MatchesCPython) {
  using train::python_format;
  // Expected strings printed by CPython 3.11's str.format.
  struct Case {
    std::string pattern, name;
    train::FormatValue value;
    std::string want;
  };
  std::vector<Case> cases = {
      {"{epoch:02d}.keras", "epoch", int64_t(3), "03.keras"},
      {"w_{loss}.keras", "loss", 0.5, "w_0.5.keras"},
      {"{loss}", "loss", 1.5e-05, "1.5e-05"},
      {"{loss}", "loss", 1e16, "1e+16"},
      {"{loss}", "loss", 123456.789, "123456.789"},
      {"{loss}", "loss", double(0.3f), "0.30000001192092896"},
      {"{loss}", "loss", 100.0, "100.0"},
      {"{acc:.3%}", "acc", 0.91234, "91.234%"},
      {"{x:+08.3f}", "x", -3.14159, "-003.142"},
      {"{x:>8.2e}|", "x", 12345.678, "1.23e+04|"},
      {"{x:g}", "x", 0.0001234, "0.0001234"},
      {"{x:.3}", "x", 2.0, "2.0"},
      {"{x:.3}", "x", 1234.5, "1.23e+03"},
      {"{e:,d}", "e", int64_t(1234567), "1,234,567"},
      {"{e:_}", "e", int64_t(-1234567), "-1_234_567"},
      {"{e:*^9}", "e", int64_t(42), "***42****"},
      {"{e:.2f}", "e", int64_t(7), "7.00"},
      {"{{literal}}{e:x<4}", "e", int64_t(5), "{literal}5xxx"},
      {"{x:G}", "x", 1e-10, "1E-10"},
      {"{x: .1f}", "x", 2.25, " 2.2"},
  };
  for (auto& c : cases)
    EXPECT_EQ(python_format(c.pattern, {{c.name, c.value}}), c.want) << c.pattern;
  EXPECT_NE(error_of([] {
              python_format("{loss:d}", {{"loss", 0.5}});
            }).find("Unknown format code 'd' for object of type 'float'"),
            std::string::npos);
  EXPECT_THROW(python_format("{nope}", {{"loss", 0.5}}), train::MissingFormatKey);
  EXPECT_NE(error_of([] { python_format("a}b", {}); }).find("Single '}'"), std::string::npos);
}

TEST(ModelCheckpoint, SaveBestOnlyWritesOnlyImprovingEpochs) {
  fs::path dir = test_util::temp_dir("model_checkpoint_best", true);
  // val_loss 0.5, 0.4, 0.45, 0.3, 0.3: improvements (strictly lower) at epochs 1, 2, 4.
  auto files = run_epochs(dir, "m_{epoch:02d}_{val_loss:.2f}.keras", {.save_best_only = true},
                          "val_loss", {0.5, 0.4, 0.45, 0.3, 0.3});
  EXPECT_EQ(files,
            (std::vector<std::string>{"m_01_0.50.keras", "m_02_0.40.keras", "m_04_0.30.keras"}));
  // Without save_best_only: every epoch.
  files = run_epochs(dir, "e{epoch}.keras", {}, "val_loss", {0.5, 0.4, 0.45});
  EXPECT_EQ(files, (std::vector<std::string>{"e1.keras", "e2.keras", "e3.keras"}));
  // mode auto on an accuracy maximises; initial_value_threshold must be beaten first.
  files = run_epochs(dir, "a{epoch}.weights.h5",
                     {.monitor = "val_accuracy",
                      .save_best_only = true,
                      .save_weights_only = true,
                      .initial_value_threshold = 0.6},
                     "val_accuracy", {0.5, 0.7, 0.65, 0.8});
  EXPECT_EQ(files, (std::vector<std::string>{"a2.weights.h5", "a4.weights.h5"}));
  // mode max on an error metric (the user knows best); a missing monitor saves anyway.
  files = run_epochs(dir, "n{epoch}.keras",
                     {.monitor = "val_mae", .save_best_only = true, .mode = "max"}, "val_mae",
                     {0.2, 0.1, 0.3});
  EXPECT_EQ(files, (std::vector<std::string>{"n1.keras", "n3.keras"}));
  files = run_epochs(dir, "x{epoch}.keras",
                     {.monitor = "val_top", .save_best_only = true, .mode = "min"}, "other",
                     {0.2, 0.1});
  EXPECT_EQ(files, (std::vector<std::string>{"x1.keras", "x2.keras"}));
}

TEST(ModelCheckpoint, KerasErrors) {
  auto e = error_of([] { callbacks::ModelCheckpoint("m.h5"); });
  EXPECT_NE(e.find("must end in `.keras`"), std::string::npos) << e;
  e = error_of([] { callbacks::ModelCheckpoint("m.keras", {.save_weights_only = true}); });
  EXPECT_NE(e.find("must end in `.weights.h5`"), std::string::npos) << e;
  e = error_of([] { callbacks::ModelCheckpoint("m.keras", {.save_freq = std::string("step")}); });
  EXPECT_NE(e.find("Unrecognized save_freq: step"), std::string::npos) << e;
  e = error_of([] { callbacks::ModelCheckpoint("m.keras", {.save_freq = int64_t(0)}); });
  EXPECT_NE(e.find("save_freq"), std::string::npos) << e;
  fs::path dir = test_util::temp_dir("model_checkpoint_errors", true);
  e = error_of([&] { run_epochs(dir, "{val_acc}.keras", {}, "val_loss", {0.1}); });
  EXPECT_NE(e.find("Failed to format this callback filepath"), std::string::npos) << e;
  EXPECT_NE(e.find("'val_acc'"), std::string::npos) << e;
  e = error_of([&] {
    run_epochs(dir, "m.keras", {.monitor = "val_widget", .save_best_only = true}, "val_widget",
               {0.1});
  });
  EXPECT_NE(e.find("isn't able to automatically determine"), std::string::npos) << e;
  fs::create_directories(dir / "d.keras");
  e = error_of([&] { run_epochs(dir, "d.keras", {}, "val_loss", {0.1}, /*fresh=*/false); });
  EXPECT_NE(e.find("non-directory filepath"), std::string::npos) << e;
}

TEST(ModelCheckpoint, ThroughFitSavesLoadableFilesWithLoggedNames) {
  fs::path dir = test_util::temp_dir("model_checkpoint_fit", true);
  set_random_seed(7);
  Model m = small_model();
  auto [x, y] = small_data(30);
  auto h = m.fit(x, y,
                 {.batch_size = 10,
                  .epochs = 3,
                  .verbose = 0,
                  .callbacks = {callbacks::ModelCheckpoint(
                      (dir / "sub" / "ep{epoch:02d}-loss{loss:.4f}.keras").string(),
                      {.monitor = "loss", .save_best_only = true})},
                  .shuffle = false});
  // Names carry the epoch's logged loss; only epochs whose loss fell are written.
  std::vector<std::string> want;
  double best = 1e30;
  for (size_t e = 0; e < h.history["loss"].size(); ++e) {
    double l = h.history["loss"][e];
    if (l >= best) continue;
    best = l;
    char name[64];
    std::snprintf(name, sizeof name, "ep%02zu-loss%.4f.keras", e + 1, l);
    want.push_back(name);
  }
  ASSERT_EQ(want.size(), 3u) << "the loss fell every epoch in this setting";
  EXPECT_EQ(files_in(dir / "sub"), want);
  // The last file is the final model: the same predictions after load_model.
  Model loaded = load_model((dir / "sub" / want.back()).string());
  Tensor a = m.predict(x), b = loaded.predict(x);
  for (int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]);
}

TEST(ModelCheckpoint, SaveFreqInBatchesCountsAcrossEpochs) {
  fs::path dir = test_util::temp_dir("model_checkpoint_batches", true);
  Model m = small_model();
  auto [x, y] = small_data(10);
  // 5 batches per epoch, 3 epochs, every 3 batches: global batches 3, 6, 9, 12, 15 =
  // (epoch 1, batch 3), (2, 1), (2, 4), (3, 2), (3, 5).
  m.fit(x, y,
        {.batch_size = 2,
         .epochs = 3,
         .verbose = 0,
         .callbacks = {
             callbacks::ModelCheckpoint((dir / "e{epoch}b{batch}.weights.h5").string(),
                                        {.save_weights_only = true, .save_freq = int64_t(3)})}});
  EXPECT_EQ(files_in(dir),
            (std::vector<std::string>{"e1b3.weights.h5", "e2b1.weights.h5", "e2b4.weights.h5",
                                      "e3b2.weights.h5", "e3b5.weights.h5"}));
  // Weights-only files load into the same architecture; the last one holds the final weights.
  Model other = small_model();
  other.load_weights((dir / "e3b5.weights.h5").string());
  EXPECT_EQ(other.get_weights()[0].to_vector(), m.get_weights()[0].to_vector());
}
