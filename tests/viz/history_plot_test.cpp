// Training-curve PNG: the file decodes to the promised size; every epoch's point is drawn in
// its line's colour at the pixel the panel's scales give (train blue, validation orange);
// panels come in Keras's order (loss first); axes, title and labels are drawn; bad histories
// are errors naming the series.
#include "lockstep/viz/history_plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "lockstep/data/image.h"
#include "test_util.h"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

constexpr uint8_t black[3] = {0, 0, 0};

bool has_color(const Tensor& img, int x, int y, const uint8_t rgb[3]) {
  const uint8_t* p = img.data<uint8_t>() + (int64_t(y) * img.dim(1) + x) * img.dim(2);
  return p[0] == rgb[0] && p[1] == rgb[1] && p[2] == rgb[2];
}

int64_t count_color(const Tensor& img, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
  int64_t n = 0;
  for (int y = y0; y <= y1; ++y)
    for (int x = x0; x <= x1; ++x) n += has_color(img, x, y, rgb);
  return n;
}

viz::SeriesMap history() {
  return {{"loss", {1.2, 0.8, 0.55, 0.42, 0.37}},
          {"val_loss", {1.0, 0.9, 0.7, 0.66, 0.64}},
          {"accuracy", {0.55, 0.7, 0.8, 0.85, 0.87}},
          {"val_accuracy", {0.6, 0.68, 0.74, 0.77, 0.78}},
          {"learning_rate", {1e-3, 1e-3, 5e-4, 5e-4, 2.5e-4}},
          {"input_wait_seconds", {0.1, 0.1, 0.1, 0.1, 0.1}}};
}

}  // namespace

TEST(HistoryPlot, PngHasTheLinesColoursAtTheirPoints) {
  fs::path dir = test_util::temp_dir("history_plot", /*fresh=*/true);
  const std::string path = (dir / "curves.png").string();
  viz::SeriesMap h = history();
  viz::save_history_plot(h, path);
  viz::HistoryPlot plot = viz::render_history_plot(h);
  Tensor png = data::read_image(path);
  // Three panels in a row (loss, accuracy, learning_rate; input_wait_seconds excluded) under
  // a 44-pixel title band: 3 x 440 by 44 + 320.
  ASSERT_EQ(png.shape(), Shape({364, 1320, 3}));
  ASSERT_EQ(plot.panels.size(), 3u);
  EXPECT_EQ(plot.panels[0].name, "loss");
  EXPECT_EQ(plot.panels[1].name, "accuracy");
  EXPECT_EQ(plot.panels[2].name, "learning_rate");
  EXPECT_FALSE(plot.panels[2].has_validation);
  for (const auto& p : plot.panels) {
    SCOPED_TRACE(p.name);
    for (int e = 0; e < 5; ++e) {
      auto [x, y] = p.pixel(e, h.at(p.name)[size_t(e)]);
      EXPECT_TRUE(has_color(png, x, y, viz::kTrainColor))
          << "epoch " << e << " at " << x << "," << y;
      if (p.has_validation) {
        auto [vx, vy] = p.pixel(e, h.at("val_" + p.name)[size_t(e)]);
        EXPECT_TRUE(has_color(png, vx, vy, viz::kValidationColor)) << "epoch " << e;
      }
    }
    // Higher values are drawn higher: the loss's first point above its last.
    EXPECT_LT(p.pixel(0, p.y_max).second, p.pixel(0, p.y_min).second);
    EXPECT_TRUE(has_color(png, p.left, p.bottom, black)) << "axes corner";
  }
  // The validation colour appears only in the panels that have a validation series.
  const auto& lr = plot.panels[2];
  EXPECT_EQ(count_color(png, lr.left, lr.top, lr.right, lr.bottom, viz::kValidationColor), 0);
  EXPECT_GT(count_color(png, lr.left, lr.top, lr.right, lr.bottom, viz::kTrainColor), 50);
  // Title and tick labels: dark text pixels above the panels and left of the first y axis.
  const uint8_t text[3] = {40, 40, 40};
  EXPECT_GT(count_color(png, 0, 0, 1319, 40, black), 100);
  EXPECT_GT(
      count_color(png, 0, plot.panels[0].top, plot.panels[0].left - 6, plot.panels[0].bottom, text),
      50);
  int files = 0;
  for (auto& e : fs::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "no temporary file is left behind";
}

TEST(HistoryPlot, OneEpochNansAndColumns) {
  viz::SeriesMap one{{"loss", {0.5}}, {"val_loss", {0.6}}};
  viz::HistoryPlot p = viz::render_history_plot(one, {.columns = 1});
  ASSERT_EQ(p.panels.size(), 1u);
  auto [x, y] = p.panels[0].pixel(0, 0.5);
  EXPECT_TRUE(has_color(p.image, x, y, viz::kTrainColor));
  EXPECT_EQ(p.image.dim(1), 440);
  // A NaN leaves a gap; the other points are still drawn.
  viz::SeriesMap gap{{"loss", {1.0, std::nan(""), 0.5}}};
  viz::HistoryPlot g = viz::render_history_plot(gap);
  auto [x2, y2] = g.panels[0].pixel(2, 0.5);
  EXPECT_TRUE(has_color(g.image, x2, y2, viz::kTrainColor));
  auto [x1, y1] = g.panels[0].pixel(1, 0.75);  // midway between the two points: no line
  EXPECT_FALSE(has_color(g.image, x1, y1, viz::kTrainColor));
}

TEST(HistoryPlot, BadHistoriesAreErrors) {
  std::string e = test_util::error_of([] { viz::render_history_plot({}); });
  EXPECT_NE(e.find("nothing to plot"), std::string::npos) << e;
  e = test_util::error_of([] {
    viz::render_history_plot({{"loss", {1, 2, 3}}, {"val_loss", {1, 2}}});
  });
  EXPECT_NE(e.find("'val_loss' has 2 values"), std::string::npos) << e;
  e = test_util::error_of([] { viz::save_history_plot({{"loss", {1.0}}}, "/proc/no/dir/c.png"); });
  EXPECT_NE(e.find("/proc/no/dir/c.png"), std::string::npos) << e;
}

// Two training phases (transfer learning): a dashed line in kPhaseColor midway between the
// last head epoch and the first fine-tuning epoch in every panel, none elsewhere; phases out
// of order are an error naming the phase.
TEST(HistoryPlot, PhaseBoundaryIsDrawnBetweenThePhases) {
  viz::SeriesMap h = history();
  viz::HistoryPlot plain = viz::render_history_plot(h);
  viz::HistoryPlot plot = viz::render_history_plot(h, {.phases = {{0, "head"}, {3, "fine-tune"}}});
  ASSERT_EQ(plot.panels.size(), 3u);
  for (const auto& p : plot.panels) {
    const int x = (p.pixel(2, p.y_min).first + p.pixel(3, p.y_min).first) / 2;
    // Dashes: 5 of every 8 pixels down the plot area, in the phase colour.
    const int64_t on_line = count_color(plot.image, x, p.top, x, p.bottom - 1, viz::kPhaseColor);
    EXPECT_GE(on_line, (p.bottom - p.top) / 2) << p.name;
    EXPECT_LT(on_line, p.bottom - p.top) << p.name << ": dashed, not solid";
    EXPECT_EQ(count_color(plain.image, x, p.top, x, p.bottom - 1, viz::kPhaseColor), 0) << p.name;
    // The phase names (text in the phase colour) at the top, near each phase's start.
    EXPECT_GT(count_color(plot.image, x + 4, p.top + 4, x + 60, p.top + 12, viz::kPhaseColor), 0);
    EXPECT_GT(
        count_color(plot.image, p.left + 4, p.top + 4, p.left + 40, p.top + 12, viz::kPhaseColor),
        0);
    // Between epochs 1 and 2 (the same phase): no line.
    const int x01 = (p.pixel(0, p.y_min).first + p.pixel(1, p.y_min).first) / 2;
    EXPECT_EQ(count_color(plot.image, x01, p.top + 20, x01, p.bottom - 1, viz::kPhaseColor), 0);
  }
  EXPECT_THROW(viz::render_history_plot(h, {.phases = {{0, "head"}, {5, "fine-tune"}}}), Error);
  EXPECT_THROW(viz::render_history_plot(h, {.phases = {{1, "head"}}}), Error);
}
