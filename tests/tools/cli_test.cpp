// The `lockstep` command line end to end (bin/lockstep; skipped when it is not built): train a
// Keras model JSON on a generated image folder, predict with the class names the file keeps,
// summary, convert between .keras / .weights.h5 / checkpoints / JSON, resume training from a
// .keras file, the logging / cost-report flags of train, and clear errors for bad arguments.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lockstep/lockstep.h"
#include "test_util.h"
#include "tools/cli_test_util.h"

using namespace lockstep;
using namespace lockstep::layers;
namespace fs = std::filesystem;

namespace {

using cli_test::binary;
using cli_test::CliRun;

CliRun run(const std::string& args) {
  const std::string cmd = "timeout 300 " + binary() + " " + args + " 2>&1";
  return cli_test::run_shell(cmd);
}

// Two classes a model can tell apart: bright and dark noisy 10x10 images, PNG and JPEG.
void write_image_folder(const fs::path& dir, int per_class) {
  uint64_t x = 12345;
  for (int c = 0; c < 2; ++c) {
    const std::string name = c == 0 ? "bright" : "dark";
    fs::create_directories(dir / name);
    for (int i = 0; i < per_class; ++i) {
      Tensor img = Tensor::zeros(Shape{10, 10, 3}, DType::u8);
      for (int64_t k = 0; k < img.numel(); ++k) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const int noise = int((x >> 40) % 60);
        img.data<uint8_t>()[k] = uint8_t(c == 0 ? 190 + noise : 10 + noise);
      }
      const std::string file = name + "_" + std::to_string(i) + (i % 2 ? ".png" : ".jpg");
      data::write_image((dir / name / file).string(), img);
    }
  }
}

// "path: name p, name p" -> the first name.
std::vector<std::pair<std::string, std::string>> top1(const std::string& out) {
  std::vector<std::pair<std::string, std::string>> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    std::istringstream rest(line.substr(colon + 2));
    std::string name;
    rest >> name;
    rows.push_back({line.substr(0, colon), name});
  }
  return rows;
}

class LockstepCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (binary().empty()) GTEST_SKIP() << "bin/lockstep not built";
    dir = test_util::temp_dir("lockstep_cli", false);
    images = dir / "images";
    if (!fs::exists(images / "dark")) write_image_folder(images, 16);
    // Layer names (and so the file's config) independent of the tests run before in this
    // process: the run below trains from the file with a fixed seed.
    reset_layer_names();
    Model m = Sequential({Input({10, 10, 3}), Rescaling(1.0 / 255),
                          Conv2D(4, 3, {.activation = "relu"}), GlobalAveragePooling2D(), Dense(2)},
                         "tiny_cnn");
    std::ofstream(dir / "config.json") << m.to_json();
  }
  std::string p(const std::string& f) const { return (dir / f).string(); }
  fs::path dir, images;
};

}  // namespace

TEST_F(LockstepCli, TrainPredictSummaryConvertResume) {
  CliRun t = run("train --model " + p("config.json") + " --data-dir " + images.string() +
                 " --epochs 12 --batch-size 8 --validation-split 0.25 --seed 3 --learning-rate 0.05"
                 " --threads 2 --out " +
                 p("m.keras") + " --checkpoint " + p("ckpt/{epoch:02d}.keras"));
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("wrote " + p("m.keras") + " (2 classes)"), std::string::npos) << t.out;
  EXPECT_EQ(load_model_metadata(p("m.keras"))["class_names"], json({"bright", "dark"}));
  EXPECT_FALSE(fs::is_empty(dir / "ckpt"));
  // Predict every image: the class names come from the file; the model learnt the task.
  CliRun pr = run("predict " + p("m.keras") + " " + images.string() + " --top-k 2");
  ASSERT_EQ(pr.rc, 0) << pr.out;
  auto rows = top1(pr.out);
  ASSERT_EQ(rows.size(), 32u) << pr.out;
  int right = 0;
  for (auto& [file, name] : rows) right += fs::path(file).parent_path().filename() == name;
  EXPECT_GE(right, 30) << pr.out;
  // One file; --top-k larger than the class count lists every class.
  CliRun one = run("predict " + p("m.keras") + " " + (images / "dark" / "dark_3.png").string() +
                   " --top-k 5");
  ASSERT_EQ(one.rc, 0) << one.out;
  EXPECT_NE(one.out.find("dark_3.png: dark "), std::string::npos) << one.out;
  EXPECT_NE(one.out.find(", bright "), std::string::npos) << one.out;
  // Summary: layers, the compile config with the optimizer's step count, the classes.
  CliRun s = run("summary " + p("m.keras"));
  ASSERT_EQ(s.rc, 0) << s.out;
  for (const char* want : {"tiny_cnn", "conv2d", "Optimizer: adam", "iterations 36",
                           "SparseCategoricalCrossentropy", "Classes (2): [\"bright\",\"dark\"]"})
    EXPECT_NE(s.out.find(want), std::string::npos) << want << "\n" << s.out;
  // Convert: weights-only targets say so; weights-only inputs need --model.
  CliRun c1 = run("convert " + p("m.keras") + " " + p("w.weights.h5"));
  ASSERT_EQ(c1.rc, 0) << c1.out;
  EXPECT_NE(c1.out.find("weights only"), std::string::npos) << c1.out;
  CliRun c2 = run("convert " + p("w.weights.h5") + " " + p("back.keras"));
  EXPECT_EQ(c2.rc, 1) << c2.out;
  EXPECT_NE(c2.out.find("--model"), std::string::npos) << c2.out;
  ASSERT_EQ(
      run("convert " + p("w.weights.h5") + " " + p("w.lsckpt") + " --model " + p("config.json")).rc,
      0);
  CliRun c3 =
      run("convert " + p("w.lsckpt") + " " + p("back.keras") + " --model " + p("config.json"));
  ASSERT_EQ(c3.rc, 0) << c3.out;
  ASSERT_EQ(run("convert " + p("m.keras") + " " + p("again.json")).rc, 0);
  Model original = load_model(p("m.keras"));
  Model back = load_model(p("back.keras"));
  Model from_json = model_from_json(test_util::read_text_file(p("again.json")));
  EXPECT_EQ(from_json.count_params(), original.count_params());
  auto wo = original.get_weights(), wb = back.get_weights();
  ASSERT_EQ(wo.size(), wb.size());
  for (size_t i = 0; i < wo.size(); ++i) EXPECT_EQ(wo[i].to_vector(), wb[i].to_vector()) << i;
  // Resume: train one more epoch from m.keras; its optimizer continues (36 + 3 steps).
  CliRun r =
      run("train --model " + p("m.keras") + " --data-dir " + images.string() +
          " --epochs 1 --batch-size 8 --validation-split 0.25 --seed 3 --out " + p("m2.keras"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(run("summary " + p("m2.keras")).out.find("iterations 39"), std::string::npos);
}

// The examples' logging flags: CSV epoch logs (whose numbers are the run's own: the last row's
// loss and accuracy are the ones the final JSON line prints), TensorBoard event files, the cost
// report priced from a table, and curves.png next to --out.
TEST_F(LockstepCli, TrainWritesLogsCostReportAndCurves) {
  fs::path out = dir / "logged";
  fs::remove_all(out);
  fs::create_directories(out);
  std::ofstream(out / "prices.json") << R"({"small": 0.5, "big": 7.25})";
  CliRun t =
      run("train --model " + p("config.json") + " --data-dir " + images.string() +
          " --epochs 3 --batch-size 8 --validation-split 0.25 --seed 5 --threads 2" + " --out " +
          (out / "m.keras").string() + " --csv " + (out / "log.csv").string() + " --tensorboard " +
          (out / "tb").string() + " --report " + (out / "cost.json").string() + " --prices " +
          (out / "prices.json").string() + " --machine big");
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("wrote " + (out / "curves.png").string()), std::string::npos) << t.out;
  // curves.png is a real PNG.
  Tensor png = data::read_image((out / "curves.png").string());
  EXPECT_GT(png.dim(0), 100);
  EXPECT_GT(png.dim(1), 100);
  // The CSV: a header and one row per epoch; its last row matches the printed result.
  std::istringstream csv(test_util::read_text_file((out / "log.csv").string()));
  std::string header, line, last;
  std::getline(csv, header);
  int rows = 0;
  while (std::getline(csv, line))
    if (!line.empty()) ++rows, last = line;
  EXPECT_EQ(rows, 3) << header;
  std::vector<std::string> cols, vals;
  for (std::istringstream h(header); std::getline(h, line, ',');) cols.push_back(line);
  for (std::istringstream v(last); std::getline(v, line, ',');) vals.push_back(line);
  ASSERT_EQ(cols.size(), vals.size()) << header << "\n" << last;
  const json result = json::parse(t.out.substr(t.out.rfind("{\"epochs\"")));
  for (const char* key : {"loss", "accuracy", "val_accuracy"}) {
    auto it = std::find(cols.begin(), cols.end(), key);
    ASSERT_NE(it, cols.end()) << key << " not in " << header;
    EXPECT_NEAR(std::stod(vals[it - cols.begin()]), result[key].get<double>(), 1e-4) << key;
  }
  // TensorBoard: event files for the training and validation runs.
  int event_files = 0;
  for (auto& e : fs::recursive_directory_iterator(out / "tb"))
    event_files += e.path().filename().string().find("tfevents") != std::string::npos;
  EXPECT_GE(event_files, 1);
  // The cost report: priced from the table's "big" entry, three epochs, the chart next to it.
  json report = json::parse(test_util::read_text_file((out / "cost.json").string()));
  EXPECT_EQ(report["price_per_hour"].get<double>(), 7.25);
  EXPECT_EQ(report["machine"], "big");
  ASSERT_EQ(report["epochs"].size(), 3u);
  EXPECT_EQ(report["monitor"], "val_accuracy");
  EXPECT_NEAR(report["epochs"][2]["monitor_value"].get<double>(), result["val_accuracy"], 1e-4);
  EXPECT_NEAR(report["total_cost"].get<double>(),
              7.25 * report["wall_seconds"].get<double>() / 3600.0, 1e-9);
  EXPECT_TRUE(fs::exists(out / "cost.png"));
  // Pricing flags without --report, and an unknown machine, are errors naming the flag.
  CliRun bad = run("train --model " + p("config.json") + " --data-dir " + images.string() +
                   " --epochs 1 --out " + p("x.keras") + " --price-per-hour 3");
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.out.find("add --report"), std::string::npos) << bad.out;
  CliRun unknown =
      run("train --model " + p("config.json") + " --data-dir " + images.string() +
          " --epochs 1 --out " + p("x.keras") + " --report " + (out / "c2.json").string() +
          " --prices " + (out / "prices.json").string() + " --machine tiny");
  EXPECT_EQ(unknown.rc, 1);
  EXPECT_NE(unknown.out.find("tiny"), std::string::npos) << unknown.out;
}

TEST_F(LockstepCli, MirroredStrategyTrains) {
  CliRun t = run("train --model " + p("config.json") + " --data-dir " + images.string() +
                 " --epochs 1 --batch-size 8 --strategy mirrored --threads 2 --out " +
                 p("mirrored.keras"));
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_TRUE(fs::exists(p("mirrored.keras")));
}

// --device xla:cpu --replicas 2: XlaStrategy on 2 devices of the CPU plugin (connect() prints
// them); the batch of 8 is split 4 + 4 and the model saved as after any fit.
TEST_F(LockstepCli, XlaReplicasTrain) {
#ifndef LOCKSTEP_XLA
  GTEST_SKIP() << "built without LOCKSTEP_XLA";
#else
  CliRun t = run("train --model " + p("config.json") + " --data-dir " + images.string() +
                 " --epochs 1 --batch-size 8 --device xla:cpu --replicas 2 --threads 2 --out " +
                 p("replicas.keras"));
  if (t.rc != 0 && t.out.find("no PJRT") != std::string::npos) GTEST_SKIP() << t.out;
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("XLA: connected to cpu: 2 devices"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("Strategy: XlaStrategy, 2 replicas in sync"), std::string::npos) << t.out;
  EXPECT_TRUE(fs::exists(p("replicas.keras")));
#endif
}

// --mesh batch=2,model=2 --layout-map rules.json: ModelParallel (lockstep/distribute/
// distribution.h) on 4 devices of the CPU plugin; summary() lists each weight's layout and bytes
// per device, a rule that matches nothing is a warning, and the saved file loads on one device.
TEST_F(LockstepCli, XlaMeshTrainWithALayoutMap) {
#ifndef LOCKSTEP_XLA
  GTEST_SKIP() << "built without LOCKSTEP_XLA";
#else
  std::ofstream(p("rules.json")) << R"({"dense.*kernel": [null, "model"], "dense.*bias": ["model"],
      "conv2d.*kernel": [null, null, null, "model"], "lstm.*kernel": [null, "model"]})";
  CliRun t = run("train --model " + p("config.json") + " --data-dir " + images.string() +
                 " --epochs 1 --batch-size 8 --device xla:cpu --mesh batch=2,model=2 "
                 "--layout-map " +
                 p("rules.json") + " --threads 2 --out " + p("mesh.keras"));
  if (t.rc != 0 && t.out.find("no PJRT") != std::string::npos) GTEST_SKIP() << t.out;
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_NE(t.out.find("Distribution: ModelParallel on mesh (batch=2, model=2), batch split over "
                       "'batch'"),
            std::string::npos)
      << t.out;
  // conv2d/kernel: 3x3x3x4 floats, half of them per device.
  const size_t row = t.out.find("  conv2d/kernel ");
  ASSERT_NE(row, std::string::npos) << t.out;
  const std::string line = t.out.substr(row, t.out.find('\n', row) - row);
  EXPECT_NE(line.find("(None, None, None, 'model')"), std::string::npos) << line;
  EXPECT_NE(line.find("216.00 B / device"), std::string::npos) << line;
  EXPECT_NE(t.out.find("layout rule 'lstm.*kernel' matches no variable"), std::string::npos)
      << t.out;
  Model m = load_model(p("mesh.keras"), false);
  EXPECT_EQ(m.get_weights().size(), 4u);
#endif
}

// --backup-dir: a BackupAndRestore (and the SIGTERM/SIGINT handler, exit status 75; the signal
// itself is tested on distributed_train in tests/train/preemption_test.cpp). A run that
// completes deletes its backup; --help documents the exit status.
TEST_F(LockstepCli, TrainWithABackupDirCompletesAndDeletesTheBackup) {
  CliRun t = run("train --model " + p("config.json") + " --data-dir " + images.string() +
                 " --epochs 2 --batch-size 8 --threads 2 --backup-dir " + p("backup") + " --out " +
                 p("backed_up.keras"));
  ASSERT_EQ(t.rc, 0) << t.out;
  EXPECT_TRUE(fs::exists(p("backed_up.keras")));
  EXPECT_FALSE(fs::exists(p("backup/checkpoint.lsckpt")));
  CliRun help = run("train --help");
  EXPECT_NE(help.out.find("exits\n                            with status 75"), std::string::npos)
      << help.out;
}

TEST_F(LockstepCli, BadArgumentsGiveClearErrors) {
  struct Case {
    std::string args, want;
    int rc;
  };
  const std::string data = " --data-dir " + images.string() + " --out " + p("x.keras");
  std::vector<Case> cases = {
      {"train --model " + p("config.json") + data + " --epochs ten", "--epochs", 1},
      {"train --model " + p("config.json") + data + " --epochs 1 --layout-map r.json",
       "--layout-map needs --mesh", 1},
      {"train --model " + p("config.json") + data + " --epochs 1 --mesh batch=2 --replicas 2",
       "--mesh (a keras.distribution over devices of --device xla:...) and --replicas", 1},
      {"train --model " + p("config.json") + data, "--epochs is required", 1},
      {"train --model " + p("config.json") + data + " --epochs 1 --batch-size 0", "--batch-size",
       1},
      {"train --model " + p("config.json") + data + " --epochs 1 --validation-split 1",
       "--validation-split", 1},
      {"train --model " + p("config.json") + data + " --epochs 1 --strategy tpu", "--strategy", 1},
      {"train --model " + p("config.json") + data + " --epochs 1 --replicas 2",
       "--replicas 2 needs --device xla:PLUGIN", 1},
      {"train --model " + p("config.json") + data +
           " --epochs 1 --device xla:cpu --replicas 2 --strategy mirrored",
       "two strategies; give one", 1},
      {"train --model " + p("nope.json") + data + " --epochs 1", "nope.json", 1},
      {"train --model " + p("config.json") + " --data-dir " + images.string() +
           " --epochs 1 --out x.h5",
       "must end in .keras", 1},
      {"predict " + p("m.keras"), "expected 2 file argument(s), got 1", 1},
      {"predict " + p("missing.keras") + " " + images.string(), "missing.keras", 1},
      {"predict x.keras y --top-k 0", "--top-k", 1},
      {"summary a b", "expected 1", 1},
      {"convert " + p("config.json") + " " + p("y.keras"), "without weights", 1},
      {"summary --frobnicate " + p("config.json"), "unknown option --frobnicate", 1},
      {"launch-rockets", "unknown command", 2},
  };
  for (auto& c : cases) {
    CliRun r = run(c.args);
    EXPECT_EQ(r.rc, c.rc) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.want), std::string::npos) << c.args << "\n" << r.out;
  }
  // The wrong number of classes for the model's head.
  Model three = Sequential({Input({10, 10, 3}), Flatten(), Dense(3)});
  std::ofstream(p("three.json")) << three.to_json();
  CliRun r = run("train --model " + p("three.json") + data + " --epochs 1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("the image folder has 2 classes"), std::string::npos) << r.out;
  // --help on each command, exit 0.
  for (const char* cmd :
       {"summary", "predict", "train", "convert", "export-image-folder", "ops-doc"}) {
    CliRun h = run(std::string(cmd) + " --help");
    EXPECT_EQ(h.rc, 0) << cmd;
    EXPECT_NE(h.out.find("usage: lockstep " + std::string(cmd)), std::string::npos) << h.out;
  }
  CliRun top = run("--help");
  EXPECT_EQ(top.rc, 0);
  for (const char* cmd : {"summary", "predict", "train", "convert"})
    EXPECT_NE(top.out.find(cmd), std::string::npos) << top.out;
}
