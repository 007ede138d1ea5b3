// CostReport (times, images/s, memory, hardware, cost to each threshold; JSON + PNG), the
// cost-report comparison chart and the confusion-matrix PNG.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <fstream>

#include "lockstep/distribute/strategy.h"
#include "lockstep/lockstep.h"
#include "test_util.h"

using namespace lockstep;
namespace ds = lockstep::distribute;
using test_util::error_of;

namespace {

// 3 well separated classes in 2-d: accuracy climbs over a few SGD epochs.
std::pair<Tensor, Tensor> blobs(int64_t n, uint64_t seed) {
  Tensor x = Tensor::empty(Shape{n, 2});
  Tensor y = Tensor::empty(Shape{n}, DType::i32);
  Philox rng(seed);
  const float centers[3][2] = {{2, 0}, {-1, 1.7f}, {-1, -1.7f}};
  for (int64_t i = 0; i < n; ++i) {
    const int c = int(i % 3);
    y.data<int32_t>()[i] = c;
    x.data<float>()[2 * i] = centers[c][0] + 0.8f * (rng.uniform() - 0.5f);
    x.data<float>()[2 * i + 1] = centers[c][1] + 0.8f * (rng.uniform() - 0.5f);
  }
  return {x, y};
}

Model classifier() {
  set_random_seed(7);
  reset_layer_names();
  Model m = Sequential({layers::Input({2}), layers::Dense(3)});
  m.compile({.optimizer = optimizers::SGD(0.05),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  return m;
}

Tensor read_png(const std::string& path) {
  return data::decode_image(data::read_file_bytes(path), path);
}

json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

}  // namespace

TEST(CostReport, TimesThresholdsCostAndFiles) {
  auto dir = test_util::temp_dir("cost_report", true);
  auto [x, y] = blobs(96, 1);
  auto [vx, vy] = blobs(48, 2);
  Model m = classifier();
  auto report = callbacks::CostReport({.path = (dir / "run.json").string(),
                                       .thresholds = {-1.0, 0.9, 1.5},
                                       .price_per_hour = 3.93,
                                       .label = "cpu test",
                                       .verbose = 0});
  History h = m.fit(x, y,
                    {.batch_size = 16,
                     .epochs = 4,
                     .verbose = 0,
                     .callbacks = {report},
                     .validation_data = ValidationData(vx, vy)});
  json r = read_json(dir / "run.json");
  EXPECT_EQ(r["epochs"], report->report()["epochs"]);  // the file holds the report
  ASSERT_EQ(r["epochs"].size(), 4u);
  EXPECT_EQ(r["monitor"], "val_accuracy");
  EXPECT_EQ(r["label"], "cpu test");
  // Samples and images/s agree with the History.
  EXPECT_EQ(r["samples"].get<int64_t>(), 4 * 96);
  EXPECT_NEAR(r["train_seconds"].get<double>(), h.train_seconds, 1e-9);
  EXPECT_NEAR(r["images_per_second"].get<double>(), h.images_per_second, 1e-6);
  // Per epoch: cumulative times grow; val_accuracy is the History's; cost is price x wall.
  double last_wall = 0;
  for (size_t e = 0; e < 4; ++e) {
    const json& ep = r["epochs"][e];
    EXPECT_EQ(ep["epoch"].get<int>(), int(e) + 1);
    EXPECT_GE(ep["wall_seconds"].get<double>(), last_wall);
    EXPECT_GE(ep["wall_seconds"].get<double>(), ep["train_seconds"].get<double>());
    EXPECT_NEAR(ep["monitor_value"].get<double>(), h.history.at("val_accuracy")[e], 1e-9);
    EXPECT_NEAR(ep["cost"].get<double>(), 3.93 * ep["wall_seconds"].get<double>() / 3600, 1e-12);
    last_wall = ep["wall_seconds"].get<double>();
  }
  EXPECT_NEAR(r["total_cost"].get<double>(), 3.93 * last_wall / 3600, 1e-12);
  EXPECT_NEAR(r["cost_per_epoch"].get<double>(), r["total_cost"].get<double>() / 4, 1e-12);
  // Thresholds: -1 at epoch 1; 0.9 at the first epoch whose val_accuracy >= 0.9; 1.5 never.
  int first_90 = 0;
  for (size_t e = 0; e < 4 && !first_90; ++e)
    if (h.history.at("val_accuracy")[e] >= 0.9) first_90 = int(e) + 1;
  ASSERT_GT(first_90, 0) << "the blobs should be separable";
  const json& t = r["time_to_threshold"];
  EXPECT_EQ(t[0]["epoch"].get<int>(), 1);
  EXPECT_EQ(t[1]["epoch"].get<int>(), first_90);
  EXPECT_NEAR(t[1]["wall_seconds"].get<double>(),
              r["epochs"][size_t(first_90 - 1)]["wall_seconds"].get<double>(), 1e-12);
  EXPECT_FALSE(t[2]["reached"].get<bool>());
  // Hardware and memory.
  EXPECT_EQ(r["hardware"]["cpu_model"], cpu_model_name());
  EXPECT_NE(cpu_model_name(), "");
  EXPECT_GE(r["hardware"]["cores"].get<int>(), 1);
  EXPECT_EQ(r["hardware"]["replicas"].get<int>(), 1);
  EXPECT_GT(r["peak_rss_mb"].get<double>(), 1.0);
  // The PNG: accuracy vs time and vs dollars, side by side.
  Tensor png = read_png((dir / "run.png").string());
  EXPECT_EQ(png.shape(), (Shape{400, 1120, 3}));
  EXPECT_FALSE(std::filesystem::exists(dir / ("run.json.tmp-" + std::to_string(getpid()))));
}

// Transfer learning's two fits in one report (begin_phase): the epochs of both, tagged, with
// the clock, training time and samples carried on; per-phase figures and the totals.
TEST(CostReport, TwoPhasesOneReport) {
  auto dir = test_util::temp_dir("cost_report_phases", true);
  auto [x, y] = blobs(96, 1);
  auto [vx, vy] = blobs(48, 2);
  Model m = classifier();
  auto report = callbacks::CostReport(
      {.path = (dir / "run.json").string(), .price_per_hour = 2.0, .verbose = 0});
  report->begin_phase("head");
  History h1 = m.fit(x, y,
                     {.batch_size = 16,
                      .epochs = 2,
                      .verbose = 0,
                      .callbacks = {report},
                      .validation_data = ValidationData(vx, vy)});
  json after_head = read_json(dir / "run.json");
  ASSERT_EQ(after_head["phases"].size(), 1u);
  m.compile({.optimizer = optimizers::SGD(0.01),
             .loss = losses::SparseCategoricalCrossentropy({.from_logits = true}),
             .metrics = {"accuracy"}});
  report->begin_phase("fine-tune");
  History h2 = m.fit(x, y,
                     {.batch_size = 16,
                      .epochs = 5,
                      .verbose = 0,
                      .callbacks = {report},
                      .validation_data = ValidationData(vx, vy),
                      .initial_epoch = 2});
  json r = read_json(dir / "run.json");
  ASSERT_EQ(r["epochs"].size(), 5u);
  double last_wall = 0, last_train = 0;
  for (size_t e = 0; e < 5; ++e) {
    const json& ep = r["epochs"][e];
    EXPECT_EQ(ep["epoch"].get<int>(), int(e) + 1);
    EXPECT_EQ(ep["phase"], e < 2 ? "head" : "fine-tune");
    EXPECT_GE(ep["wall_seconds"].get<double>(), last_wall);  // one clock for both phases
    EXPECT_GE(ep["train_seconds"].get<double>(), last_train);
    const auto& val = (e < 2 ? h1 : h2).history.at("val_accuracy");
    EXPECT_NEAR(ep["monitor_value"].get<double>(), val[e < 2 ? e : e - 2], 1e-9);
    last_wall = ep["wall_seconds"].get<double>(), last_train = ep["train_seconds"].get<double>();
  }
  // Totals over both phases.
  EXPECT_EQ(r["samples"].get<int64_t>(), 5 * 96);
  EXPECT_NEAR(r["train_seconds"].get<double>(), h1.train_seconds + h2.train_seconds, 1e-9);
  EXPECT_NEAR(r["total_cost"].get<double>(), 2.0 * last_wall / 3600, 1e-12);
  // Per phase.
  ASSERT_EQ(r["phases"].size(), 2u);
  const json& head = r["phases"][0];
  const json& tune = r["phases"][1];
  EXPECT_EQ(head["name"], "head");
  EXPECT_EQ(head["first_epoch"].get<int>(), 1);
  EXPECT_EQ(head["last_epoch"].get<int>(), 2);
  EXPECT_EQ(head["samples"].get<int64_t>(), 2 * 96);
  EXPECT_NEAR(head["train_seconds"].get<double>(), h1.train_seconds, 1e-9);
  EXPECT_NEAR(head["images_per_second"].get<double>(), h1.images_per_second, 1e-6);
  EXPECT_EQ(head, after_head["phases"][0]);  // the second phase leaves the first's alone
  EXPECT_EQ(tune["name"], "fine-tune");
  EXPECT_EQ(tune["first_epoch"].get<int>(), 3);
  EXPECT_EQ(tune["epochs"].get<int>(), 3);
  EXPECT_EQ(tune["samples"].get<int64_t>(), 3 * 96);
  EXPECT_NEAR(tune["train_seconds"].get<double>(), h2.train_seconds, 1e-9);
  EXPECT_LE(head["wall_seconds"].get<double>() + tune["wall_seconds"].get<double>(),
            last_wall + 1e-9);
  EXPECT_NEAR(tune["cost"].get<double>(), 2.0 * tune["wall_seconds"].get<double>() / 3600, 1e-12);
  // A fit without begin_phase starts a new report.
  m.fit(x, y, {.batch_size = 16, .epochs = 1, .verbose = 0, .callbacks = {report}});
  json fresh = report->report();
  EXPECT_EQ(fresh["epochs"].size(), 1u);
  EXPECT_FALSE(fresh.contains("phases"));
  EXPECT_EQ(fresh["samples"].get<int64_t>(), 96);
  EXPECT_THROW(report->begin_phase(""), Error);
  // Unpriced ("price_per_hour": null), printed: both phases, and the PNG has the time chart only.
  auto unpriced = callbacks::CostReport({.path = (dir / "free.json").string(), .verbose = 1});
  unpriced->begin_phase("head");
  m.fit(x, y,
        {.batch_size = 16,
         .epochs = 1,
         .verbose = 0,
         .callbacks = {unpriced},
         .validation_data = ValidationData(vx, vy)});
  unpriced->begin_phase("fine-tune");
  m.fit(x, y,
        {.batch_size = 16,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {unpriced},
         .validation_data = ValidationData(vx, vy),
         .initial_epoch = 1});
  json f = read_json(dir / "free.json");
  EXPECT_TRUE(f["price_per_hour"].is_null());
  EXPECT_EQ(f["phases"].size(), 2u);
  EXPECT_FALSE(f["phases"][1].contains("cost"));
  EXPECT_EQ(read_png((dir / "free.png").string()).shape(), (Shape{400, 560, 3}));
}

TEST(CostReport, TwoReplicasAndPriceTable) {
  auto dir = test_util::temp_dir("cost_report_2", true);
  { std::ofstream(dir / "prices.json") << R"({"a100": 3.93, "tpu_v4": 12.88})"; }
  EXPECT_DOUBLE_EQ(price_from_table((dir / "prices.json").string(), "tpu_v4"), 12.88);
  EXPECT_NE(error_of([&] {
              price_from_table((dir / "prices.json").string(), "");
            }).find("lists several machines (a100, tpu_v4)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              price_from_table((dir / "prices.json").string(), "h100");
            }).find("machine 'h100' is not in"),
            std::string::npos);
  auto strategy = ds::MirroredStrategy({"cpu:0", "cpu:1"});
  Model m = [&] {
    auto scope = strategy.scope();
    return classifier();
  }();
  auto [x, y] = blobs(64, 3);
  auto report = callbacks::CostReport({.path = (dir / "tpu.json").string(),
                                       .prices_file = (dir / "prices.json").string(),
                                       .machine = "tpu_v4",
                                       .verbose = 0});
  m.fit(x, y,
        {.batch_size = 16,
         .epochs = 2,
         .verbose = 0,
         .callbacks = {report},
         .validation_data = ValidationData(x, y)});
  json r = read_json(dir / "tpu.json");
  EXPECT_EQ(r["hardware"]["replicas"].get<int>(), 2);
  EXPECT_EQ(r["samples"].get<int64_t>(), 2 * 64);
  EXPECT_DOUBLE_EQ(r["price_per_hour"].get<double>(), 12.88);
  EXPECT_EQ(r["machine"], "tpu_v4");

  // Comparing two runs: one line each, on one chart (the `lockstep report` function).
  auto again = callbacks::CostReport(
      {.path = (dir / "cpu.json").string(), .price_per_hour = 0.5, .label = "other", .verbose = 0});
  Model one = classifier();
  one.fit(x, y,
          {.batch_size = 16,
           .epochs = 2,
           .verbose = 0,
           .callbacks = {again},
           .validation_data = ValidationData(x, y)});
  viz::save_cost_report_plot(
      std::vector<std::string>{(dir / "tpu.json").string(), (dir / "cpu.json").string()},
      (dir / "cmp.png").string());
  Tensor cmp = read_png((dir / "cmp.png").string());
  EXPECT_EQ(cmp.shape(), (Shape{400, 1120, 3}));
  // Each series has its own colour somewhere on the chart (C0 blue, C1 orange).
  bool blue = false, orange = false;
  const uint8_t* p = cmp.data<uint8_t>();
  for (int64_t i = 0; i < cmp.numel() / 3; ++i) {
    blue = blue || (p[3 * i] == 31 && p[3 * i + 1] == 119 && p[3 * i + 2] == 180);
    orange = orange || (p[3 * i] == 255 && p[3 * i + 1] == 127 && p[3 * i + 2] == 14);
  }
  EXPECT_TRUE(blue && orange);
  // The `lockstep report` command's function.
  EXPECT_EQ(viz::report_command({(dir / "tpu.json").string(), "-o", (dir / "cmd.png").string()}),
            0);
  EXPECT_TRUE(std::filesystem::exists(dir / "cmd.png"));
  EXPECT_EQ(viz::report_command({(dir / "tpu.json").string()}), 2);  // no -o
  EXPECT_NE(error_of([&] {
              viz::save_cost_report_plot(std::vector<std::string>{(dir / "prices.json").string()},
                                         (dir / "bad.png").string());
            }).find("is not a CostReport file"),
            std::string::npos);
}

TEST(ConfusionMatrixPlot, ShadesCellsByCount) {
  Tensor labels = Tensor::from_vector_i32(Shape{6}, {0, 0, 0, 1, 1, 2});
  Tensor predicted = Tensor::from_vector_i32(Shape{6}, {0, 0, 0, 1, 2, 2});
  Tensor counts = metrics::confusion_matrix(labels, predicted, 3);
  viz::ConfusionMatrixOptions o;
  o.cell = 40;
  Tensor image = viz::render_confusion_matrix(counts, {"cat", "dog", "emu"}, o);
  // Find the grid: the darkest cell is (0, 0) with 3, white cells hold 0.
  const int64_t w = image.dim(1);
  auto pixel = [&](int64_t x, int64_t y) {
    const uint8_t* p = image.data<uint8_t>() + (y * w + x) * 3;
    return std::array<int, 3>{p[0], p[1], p[2]};
  };
  // Layout: left = label width + 30, top = 40 + label width + 10 (3-letter names: 17 px).
  const int left = 17 + 30, top = 40 + 17 + 10;
  EXPECT_EQ(pixel(left + 2, top + 2), (std::array<int, 3>{8, 48, 107}));          // 3/3: darkest
  EXPECT_EQ(pixel(left + 40 + 2, top + 2), (std::array<int, 3>{255, 255, 255}));  // 0
  auto one = pixel(left + 40 + 2, top + 40 + 2);                                  // (1, 1): 1 of 3
  EXPECT_EQ(one[0], int(uint8_t(255 - (255 - 8) / 3.0)));
  auto dir = test_util::temp_dir("confusion_png", true);
  viz::save_confusion_matrix(counts, {}, (dir / "cm.png").string(), {.normalize = true});
  Tensor back = read_png((dir / "cm.png").string());
  EXPECT_GT(back.dim(0), 100);
  EXPECT_NE(error_of([&] {
              viz::render_confusion_matrix(Tensor::zeros(Shape{2, 3}), {});
            }).find("square [C, C]"),
            std::string::npos);
}
