// Line charts, the confusion-matrix heat map and the cost-report chart (lockstep/viz/chart.h).
#include "lockstep/viz/chart.h"

#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "lockstep/core/error.h"
#include "lockstep/core/file_io.h"
#include "lockstep/data/image.h"
#include "lockstep/viz/grid.h"
#include "viz/canvas.h"

namespace lockstep::viz {

namespace {

constexpr uint8_t kAxis[3] = {0, 0, 0};
constexpr uint8_t kGrid[3] = {225, 225, 225};
constexpr uint8_t kText[3] = {40, 40, 40};
constexpr uint8_t kReference[3] = {150, 150, 150};
// matplotlib's colour cycle (C0..C5).
constexpr uint8_t kColors[6][3] = {{31, 119, 180}, {255, 127, 14},  {44, 160, 44},
                                   {214, 39, 40},  {148, 103, 189}, {140, 86, 75}};
constexpr int kLeft = 64, kRight = 16, kTop = 34, kBottom = 44;

// Tick values at a 1/2/5 x 10^k step covering [lo, hi] with about `target` ticks; none when
// the range is empty or not finite. Ticks are counted, not accumulated: at 1e16 a step of 0.2
// added to t leaves t unchanged, and `t += step` never reached hi (`lockstep report` with a
// train_seconds of 1e16 looped forever); here at most 4 * target + 2 values are made.
std::vector<double> nice_ticks(double lo, double hi, int target = 5) {
  const double range = hi - lo;
  if (!std::isfinite(range) || !(range > 0)) return {};
  const double raw = range / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  if (!std::isfinite(magnitude) || !(magnitude > 0)) return {};
  double step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * magnitude) {
      step = m * magnitude;
      break;
    }
  const double first = std::ceil(lo / step - 1e-9), last = std::floor(hi / step + 1e-9);
  const double count = std::min(last - first, 4.0 * target + 1);
  std::vector<double> ticks;
  for (int i = 0; i <= int(count); ++i) {
    const double t = (first + i) * step;
    if (t < lo - step * 1e-9 || t > hi + step * 1e-9) continue;
    if (ticks.empty() || t > ticks.back()) ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

std::string tick_text(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-3))
    std::snprintf(buf, sizeof buf, "%.1e", v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// [lo, hi] of the finite values, widened a little (and made non-empty).
std::pair<double, double> padded_range(std::vector<double> values) {
  double lo = INFINITY, hi = -INFINITY;
  for (double v : values)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) return {0, 1};
  if (hi - lo < 1e-12)
    return {lo - 0.5 * std::max(1e-3, std::fabs(lo)), hi + 0.5 * std::max(1e-3, std::fabs(hi))};
  const double pad = 0.05 * hi - 0.05 * lo;  // finite even when hi - lo overflows
  return {std::max(lo - pad, -DBL_MAX), std::min(hi + pad, DBL_MAX)};
}

struct Frame {
  int left, top, right, bottom;
  double x0, x1, y0, y1;
  int px(double x) const {
    return left + int(std::lround(clamp((x - x0) / (x1 - x0)) * (right - left)));
  }
  int py(double y) const {
    return bottom - int(std::lround(clamp((y - y0) / (y1 - y0)) * (bottom - top)));
  }
  // A fraction of the axis kept near the frame (NaN from inf / inf too), so no line is drawn
  // to a pixel billions away.
  static double clamp(double f) { return f >= -1 ? std::min(f, 2.0) : -1; }
};

void draw_axes(Canvas& c, const Frame& f, const LineChart& chart) {
  for (double t : nice_ticks(f.y0, f.y1)) {
    c.line(f.left, f.py(t), f.right, f.py(t), kGrid, 1);
    const std::string s = tick_text(t);
    c.text(f.left - 6 - text_width(s), f.py(t) - 3, s, kText);
  }
  for (double t : nice_ticks(f.x0, f.x1)) {
    c.line(f.px(t), f.top, f.px(t), f.bottom, kGrid, 1);
    const std::string s = tick_text(t);
    c.text(f.px(t) - text_width(s) / 2, f.bottom + 6, s, kText);
  }
  c.line(f.left, f.top, f.left, f.bottom, kAxis, 1);
  c.line(f.left, f.bottom, f.right, f.bottom, kAxis, 1);
  c.text((f.left + f.right - text_width(chart.x_label)) / 2, f.bottom + 22, chart.x_label, kText);
  c.text(4, f.top - 14, chart.y_label, kText);
  draw_text(c.image, (c.width - text_width(chart.title, 2)) / 2, 6, chart.title, kText, 2);
}

void draw_legend(Canvas& c, const Frame& f, const std::vector<Series>& series) {
  int y = f.bottom - 14 * int(series.size()) - 4;
  for (size_t i = 0; i < series.size(); ++i, y += 14) {
    if (series[i].name.empty()) continue;
    const int x = f.right - text_width(series[i].name) - 30;
    c.line(x, y + 3, x + 16, y + 3, kColors[i % 6], 2);
    c.text(x + 22, y, series[i].name, kText);
  }
}

}  // namespace

void write_png_atomic(const std::string& path, const Tensor& image) {
  write_file_atomic(path, data::encode_png(image), "PNG image");
}

Tensor render_line_chart(const LineChart& chart) {
  LS_CHECK(chart.width >= 200 && chart.height >= 150, "line chart: ", chart.width, "x",
           chart.height, " is too small (at least 200x150)");
  std::vector<double> xs, ys = chart.y_references;
  bool any = false;
  for (const Series& s : chart.series) {
    LS_CHECK(s.x.size() == s.y.size(), "line chart '", chart.title, "': series '", s.name, "' has ",
             s.x.size(), " x values but ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xs.push_back(s.x[i]), ys.push_back(s.y[i]), any = true;
    }
  }
  LS_CHECK(any, "line chart '", chart.title, "': no series has a finite point to draw");
  auto [x0, x1] = padded_range(xs);
  auto [y0, y1] = padded_range(ys);
  Canvas c(chart.width, chart.height);
  const Frame f{kLeft, kTop, chart.width - kRight, chart.height - kBottom, x0, x1, y0, y1};
  draw_axes(c, f, chart);
  for (double r : chart.y_references)
    if (r > y0 && r < y1) c.line(f.left, f.py(r), f.right, f.py(r), kReference, 1, 4);
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    int last_x = -1, last_y = -1;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
        last_x = -1;  // a gap
        continue;
      }
      const int x = f.px(s.x[i]), y = f.py(s.y[i]);
      if (last_x >= 0) c.line(last_x, last_y, x, y, kColors[k % 6], 2);
      c.rect(x - 2, y - 2, x + 2, y + 2, kColors[k % 6]);
      last_x = x, last_y = y;
    }
  }
  draw_legend(c, f, chart.series);
  return c.image;
}

void save_line_chart(const LineChart& chart, const std::string& path) {
  write_png_atomic(path, render_line_chart(chart));
}

}  // namespace lockstep::viz
