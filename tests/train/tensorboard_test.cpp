// TensorBoard event files: CRC-32C against the RFC 3720 test vectors, TFRecord framing read
// back record by record (lengths and masked CRCs), the callback's runs and file names, and —
// with the real tensorboard package (ctest tensorboard_interop, label interop) — the scalars
// read back through tensorboard's EventAccumulator equal to fit()'s History, with Keras's tags.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "lockstep/callbacks/summary_writer.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;
namespace tb = lockstep::tensorboard;

namespace {

uint64_t read_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(s[at + size_t(i)])) << (8 * i);
  return v;
}

// The payloads of a TFRecord file; fails the test on a bad length or CRC.
std::vector<std::string> read_records(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t at = 0;
  while (at < data.size()) {
    EXPECT_LE(at + 12, data.size()) << "truncated header at " << at;
    if (at + 12 > data.size()) break;
    const uint64_t n = read_le(data, at, 8);
    EXPECT_EQ(read_le(data, at + 8, 4), tb::masked_crc32c(data.data() + at, 8)) << "at " << at;
    EXPECT_LE(at + 12 + n + 4, data.size()) << "truncated record at " << at;
    if (at + 12 + n + 4 > data.size()) break;
    std::string payload = data.substr(at + 12, size_t(n));
    EXPECT_EQ(read_le(data, at + 12 + n, 4), tb::masked_crc32c(payload.data(), payload.size()));
    records.push_back(payload);
    at += 12 + n + 4;
  }
  return records;
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::exists(dir)) return files;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      files.push_back(e.path());
  return files;
}

// A small classifier on fixed data: 40 rows of 6 features, 3 classes.
Model classifier() {
  set_random_seed(5);
  Model m =
      Sequential({layers::Input({6}), layers::Dense(8, {.activation = "relu"}), layers::Dense(3)});
  m.compile({.optimizer = optimizers::Adam(0.05),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

std::pair<Tensor, Tensor> classifier_data() {
  std::vector<float> x, y;
  for (int i = 0; i < 40; ++i) {
    for (int f = 0; f < 6; ++f) x.push_back(float(((i * 7 + f * 3) % 11) - 5) / 5.f);
    y.push_back(float(i % 3));
  }
  return {Tensor::from_vector(Shape{40, 6}, x), Tensor::from_vector(Shape{40}, y)};
}

}  // namespace

TEST(TensorBoard, Crc32cMatchesTheRfc3720Vectors) {
  EXPECT_EQ(tb::crc32c("123456789", 9), 0xE3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff'), ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[size_t(i)] = char(i);
  EXPECT_EQ(tb::crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(tb::crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(tb::crc32c(ascending.data(), 32), 0x46DD794Eu);
  // Continuing a CRC over a split buffer gives the CRC of the whole.
  EXPECT_EQ(tb::crc32c("56789", 5, tb::crc32c("1234", 4)), 0xE3069283u);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(tb::masked_crc32c("123456789", 9), ((crc >> 15) | (crc << 17)) + 0xA282EAD8u);
}

TEST(TensorBoard, WriterFramesEveryEventAsATfRecord) {
  fs::path dir = test_util::temp_dir("tb_writer", /*fresh=*/true) / "run";
  std::string path;
  {
    tb::SummaryWriter w(dir.string());
    path = w.path();
    w.scalar("epoch_loss", 0.5, 0);
    w.scalar("epoch_loss", 0.25, 1);
    w.histogram("dense/kernel/histogram", {1.f, 2.f, 2.f, 3.f}, 1, 3);
    w.text("model_summary", "    hello", 0);
  }
  const std::string name = fs::path(path).filename().string();
  EXPECT_TRUE(
      std::regex_match(name, std::regex(R"(events\.out\.tfevents\.\d{10}\..+\.\d+\.\d+\.v2)")))
      << name;
  std::vector<std::string> records = read_records(path);
  ASSERT_EQ(records.size(), 5u);  // the version event, then one per call
  EXPECT_NE(records[0].find("brain.Event:2"), std::string::npos);
  EXPECT_NE(records[1].find("epoch_loss"), std::string::npos);
  float half = 0.5f;  // simple_value: field 2, fixed32 (tag byte 0x15), little-endian
  std::string simple("\x15", 1);
  simple.append(reinterpret_cast<const char*>(&half), 4);
  EXPECT_NE(records[1].find(simple), std::string::npos);
  EXPECT_NE(records[4].find("hello"), std::string::npos);
  std::string e = test_util::error_of([] { tb::SummaryWriter("/proc/no/such/dir"); });
  EXPECT_NE(e.find("/proc/no/such/dir"), std::string::npos) << e;
}

TEST(TensorBoard, CallbackWritesTrainAndValidationRuns) {
  fs::path logs = test_util::temp_dir("tb_callback", /*fresh=*/true) / "logs";
  Model m = classifier();
  auto [x, y] = classifier_data();
  m.fit(x, y,
        {.batch_size = 8,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {callbacks::TensorBoard(
             {.log_dir = logs.string(), .histogram_freq = 1, .update_freq = int64_t(2)})},
         .validation_split = 0.25});
  auto train = event_files(logs / "train"), validation = event_files(logs / "validation");
  ASSERT_EQ(train.size(), 1u);
  ASSERT_EQ(validation.size(), 1u);
  std::vector<std::string> t = read_records(train[0]), v = read_records(validation[0]);
  auto count_tag = [](const std::vector<std::string>& recs, const std::string& tag) {
    int n = 0;
    for (const auto& r : recs) n += r.find(tag) != std::string::npos;
    return n;
  };
  EXPECT_EQ(count_tag(t, "epoch_loss"), 2);
  EXPECT_EQ(count_tag(t, "epoch_accuracy"), 2);
  EXPECT_EQ(count_tag(t, "epoch_learning_rate"), 2);
  EXPECT_EQ(count_tag(t, "batch_loss"), 4);         // 4 steps per epoch, every 2nd step
  EXPECT_EQ(count_tag(t, "/kernel/histogram"), 4);  // 2 kernels x 2 epochs
  EXPECT_EQ(count_tag(t, "graph_keras_model"), 1);
  EXPECT_EQ(count_tag(v, "epoch_loss"), 2);
  EXPECT_EQ(count_tag(v, "val_"), 0);  // the validation run drops the prefix
  EXPECT_EQ(count_tag(v, "evaluation_loss_vs_iterations"), 2);

  std::string e =
      test_util::error_of([] { callbacks::TensorBoard({.update_freq = std::string("often")}); });
  EXPECT_NE(e.find("update_freq"), std::string::npos) << e;
  EXPECT_NE(e.find("often"), std::string::npos) << e;
}

TEST(TensorBoardInterop, EventAccumulatorReadsTheHistory) {
  const char* py = std::getenv("LOCKSTEP_TB_PYTHON");
  if (!py || !*py)
    GTEST_SKIP()
        << "needs tensorboard: run `ctest -L interop` (tests/interop/run_tensorboard_interop.sh)";
  fs::path dir = test_util::temp_dir("tb_interop", /*fresh=*/true);
  fs::path logs = dir / "logs";
  Model m = classifier();
  auto [x, y] = classifier_data();
  History h = m.fit(
      x, y,
      {.batch_size = 8,
       .epochs = 3,
       .verbose = 0,
       .callbacks = {callbacks::TensorBoard(
           {.log_dir = logs.string(), .histogram_freq = 2, .update_freq = std::string("batch")})},
       .validation_split = 0.25});
  const std::string cmd = std::string(py) + " " + LOCKSTEP_SOURCE_DIR +
                          "/tests/interop/tensorboard_read.py " + logs.string() + " > " +
                          (dir / "read.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  json runs = json::parse(std::ifstream(dir / "read.json"));
  // Every History key: training logs in the train run as epoch_<key>, val_<key> in the
  // validation run as epoch_<key>; steps 0, 1, 2; values equal as float32.
  for (const auto& [key, values] : h.history) {
    const bool val = key.rfind("val_", 0) == 0;
    const std::string tag = "epoch_" + (val ? key.substr(4) : key);
    const json& scalars = runs.at(val ? "validation" : "train").at("scalars");
    ASSERT_TRUE(scalars.contains(tag)) << tag << " in " << scalars.dump();
    const json& events = scalars[tag];
    ASSERT_EQ(events.size(), values.size()) << tag;
    for (size_t e = 0; e < values.size(); ++e) {
      EXPECT_EQ(events[e][0].get<int64_t>(), int64_t(e)) << tag;
      EXPECT_EQ(events[e][1].get<double>(), double(float(values[e]))) << tag << " epoch " << e;
    }
  }
  EXPECT_TRUE(h.history.count("loss") && h.history.count("val_accuracy"));
  const json& train = runs.at("train");
  EXPECT_EQ(train.at("scalars").at("epoch_learning_rate")[0][1].get<double>(), double(0.05f));
  EXPECT_EQ(train.at("scalars").at("batch_loss").size(), 12u);  // 4 steps x 3 epochs
  EXPECT_EQ(train.at("scalars").at("batch_loss")[11][0].get<int64_t>(), 12);
  // Histograms at epochs 0 and 2 (histogram_freq 2), counting every kernel value.
  const json& hist = train.at("histograms");
  const std::string kernel = m.layers().back()->weights()[0]->name + "/histogram";
  ASSERT_TRUE(hist.contains(kernel)) << hist.dump();
  EXPECT_EQ(hist[kernel].size(), 2u);
  EXPECT_EQ(hist[kernel][1]["step"].get<int64_t>(), 2);
  EXPECT_EQ(hist[kernel][1]["num"].get<double>(), 24.0);  // 8 x 3
  std::vector<float> w = m.layers().back()->weights()[0]->value.to_vector();
  double sum = 0;
  for (float v : w) sum += v;
  EXPECT_NEAR(hist[kernel][1]["sum"].get<double>(), sum, 1e-5);
  EXPECT_EQ(hist[kernel][1]["bucket_total"].get<double>(), 24.0);
  // The model as a Keras config (graph plugin) and its summary as text.
  EXPECT_TRUE(train.at("tensors").contains("keras")) << train.dump();
  EXPECT_NE(train.at("tensors").at("keras").get<std::string>().find("Dense"), std::string::npos);
  EXPECT_NE(train.at("tensors").at("model_summary").get<std::string>().find("Total params"),
            std::string::npos);
}
