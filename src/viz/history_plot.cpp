// Training-curve panels: axes, nice ticks, 2-pixel lines with point markers, legend, title.
#include "lockstep/viz/history_plot.h"

#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "lockstep/core/error.h"
#include "lockstep/core/file_io.h"
#include "lockstep/data/image.h"
#include "lockstep/viz/grid.h"
#include "viz/canvas.h"

namespace lockstep::viz {
namespace {

constexpr uint8_t kBlack[3] = {0, 0, 0};
constexpr uint8_t kGrey[3] = {225, 225, 225};
constexpr uint8_t kText[3] = {40, 40, 40};
// Plot-area margins inside a panel: room for tick labels (left, bottom) and the panel title.
constexpr int kLeft = 62, kRight = 16, kTop = 34, kBottom = 40, kTitleBand = 44;

// 1, 2, 2.5 or 5 times a power of ten, near range / target_ticks.
double nice_step(double range, int target_ticks) {
  const double raw = range / target_ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

std::string tick_label(double v, double step) {
  int decimals = 0;  // the fewest that print every multiple of step exactly (0.25: 2)
  while (decimals < 6) {
    const double scaled = step * std::pow(10.0, decimals);
    if (std::abs(scaled - std::round(scaled)) < 1e-6 * scaled) break;
    ++decimals;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::abs(v) < step * 1e-6 ? 0.0 : v);
  return buf;
}

// The finite range of a panel's values, padded by 5% (a flat series gets a unit-ish band).
std::pair<double, double> value_range(const std::vector<const std::vector<double>*>& series) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto* s : series)
    for (double v : *s)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!std::isfinite(lo)) return {0.0, 1.0};
  if (hi - lo < 1e-12) {
    const double pad = std::max(std::abs(lo) * 0.1, 0.5);
    return {lo - pad, hi + pad};
  }
  const double pad = hi * 0.05 - lo * 0.05;  // finite even when hi - lo overflows
  return {std::max(lo - pad, -DBL_MAX), std::min(hi + pad, DBL_MAX)};
}

// loss first, then the metrics by name, learning_rate last; val_ series ride with their twin.
std::vector<std::string> panel_names(const SeriesMap& h, const HistoryPlotOptions& o) {
  std::vector<std::string> names;
  auto excluded = [&](const std::string& k) {
    return std::find(o.exclude.begin(), o.exclude.end(), k) != o.exclude.end();
  };
  for (const auto& [key, values] : h) {
    const bool val = key.rfind("val_", 0) == 0;
    const std::string base = val ? key.substr(4) : key;
    if (excluded(base) || std::find(names.begin(), names.end(), base) != names.end()) continue;
    names.push_back(base);
  }
  auto rank = [](const std::string& n) { return n == "loss" ? 0 : n == "learning_rate" ? 2 : 1; };
  std::stable_sort(names.begin(), names.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  return names;
}

void draw_axes(Canvas& c, const HistoryPanel& p) {
  const double y_step = nice_step(p.y_max - p.y_min, 5);
  // Counted, not accumulated (see chart.cpp's nice_ticks): at most 22 ticks for any finite range.
  const bool finite_step = std::isfinite(y_step) && y_step > 0;
  const double first = finite_step ? std::ceil(p.y_min / y_step) : 0;
  const double last = finite_step ? std::floor(p.y_max / y_step + 1e-9) : -1;
  const double count = finite_step ? std::min(last - first, 21.0) : -1;
  double previous = -INFINITY;
  for (int i = 0; i <= int(count); ++i) {
    const double v = (first + i) * y_step;
    if (!(v > previous) || v > p.y_max + y_step * 1e-9) continue;
    previous = v;
    const int y = p.pixel(0, v).second;
    c.line(p.left, y, p.right - 1, y, kGrey);  // grid line
    c.rect(p.left - 5, y, p.left - 1, y, kBlack);
    const std::string label = tick_label(v, y_step);
    c.text(p.left - 8 - text_width(label), y - 3, label, kText);
  }
  const double x_step = std::max(1.0, nice_step(std::max(p.epochs - 1, 1), 8));
  for (double e = 1; e <= p.epochs; e += x_step) {
    const int x = p.pixel(int(e) - 1, p.y_min).first;
    c.rect(x, p.bottom + 1, x, p.bottom + 5, kBlack);
    const std::string label = std::to_string(int(e));
    c.text(x - text_width(label) / 2, p.bottom + 9, label, kText);
  }
  c.rect(p.left - 1, p.top, p.left, p.bottom + 1, kBlack);      // y axis
  c.rect(p.left - 1, p.bottom, p.right, p.bottom + 1, kBlack);  // x axis
  c.text((p.left + p.right - text_width("epoch")) / 2, p.bottom + 22, "epoch", kText);
}

void draw_series(Canvas& c, const HistoryPanel& p, const std::vector<double>& v,
                 const uint8_t rgb[3]) {
  std::pair<int, int> prev{-1, -1};
  for (size_t e = 0; e < v.size(); ++e) {
    if (!std::isfinite(v[e])) {
      prev = {-1, -1};
      continue;
    }
    auto pt = p.pixel(int(e), v[e]);
    if (prev.first >= 0) c.line(prev.first, prev.second, pt.first, pt.second, rgb);
    c.rect(pt.first - 2, pt.second - 2, pt.first + 2, pt.second + 2, rgb);  // marker
    prev = pt;
  }
}

// The phase boundaries: dashed vertical lines midway between two phases' epochs, and the
// phases' names at the top of the plot area.
void draw_phases(Canvas& c, const HistoryPanel& p,
                 const std::vector<std::pair<int, std::string>>& phases) {
  for (size_t i = 0; i < phases.size(); ++i) {
    const int first = phases[i].first;
    int x = p.left + 4;
    if (first > 0) {
      x = (p.pixel(first - 1, p.y_min).first + p.pixel(first, p.y_min).first) / 2;
      for (int y = p.top; y < p.bottom; y += 8)
        c.rect(x, y, x, std::min(y + 4, p.bottom - 1), kPhaseColor);
      x += 4;
    }
    c.text(x, p.top + 4, phases[i].second, kPhaseColor);
  }
}

// In the right-hand corner the last epochs' points leave free: top when they lie low.
void draw_legend(Canvas& c, const HistoryPanel& p,
                 const std::vector<const std::vector<double>*>& series, const std::string& label) {
  double high = 0, n = 0;
  for (const auto* s : series)
    for (size_t e = s->size() * 2 / 3; e < s->size(); ++e)
      if (std::isfinite((*s)[e])) high += ((*s)[e] - p.y_min) / (p.y_max - p.y_min), n += 1;
  const bool at_top = n == 0 || high / n < 0.5;
  const int rows = p.has_validation ? 2 : 1;
  const int w = 18 + std::max(text_width("train"), text_width(label)) + 10, h = rows * 14 + 6;
  const int x = p.right - w - 6, y = at_top ? p.top + 6 : p.bottom - h - 8;
  const uint8_t white[3] = {255, 255, 255};
  c.rect(x, y, x + w, y + h, kGrey);
  c.rect(x + 1, y + 1, x + w - 1, y + h - 1, white);
  c.rect(x + 5, y + 8, x + 17, y + 9, kTrainColor);
  c.text(x + 22, y + 5, "train", kText);
  if (p.has_validation) {
    c.rect(x + 5, y + 22, x + 17, y + 23, kValidationColor);
    c.text(x + 22, y + 19, label, kText);
  }
}

}  // namespace

std::pair<int, int> HistoryPanel::pixel(int epoch_index, double value) const {
  const double fx = epochs <= 1 ? 0.5 : double(epoch_index) / (epochs - 1);
  double fy = (value - y_min) / (y_max - y_min);
  fy = fy >= -1 ? std::min(fy, 2.0) : -1;  // near the panel (and NaN from inf / inf): no line
                                           // is drawn to a pixel billions away
  const int inset = 8;                     // keep the first and last markers off the axes
  return {left + inset + int(std::lround(fx * (right - left - 2 * inset))),
          bottom - int(std::lround(fy * (bottom - top)))};
}

HistoryPlot render_history_plot(const SeriesMap& history, const HistoryPlotOptions& o) {
  const std::vector<std::string> names = panel_names(history, o);
  LS_CHECK(!names.empty(), "history plot: the history has nothing to plot (",
           history.empty() ? "no series" : "every series is excluded", ")");
  LS_CHECK(o.panel_width >= 200 && o.panel_height >= 150,
           "history plot: panels must be at least 200x150 pixels, got ", o.panel_width, "x",
           o.panel_height);
  size_t epochs = 0;
  for (const auto& [k, v] : history) epochs = std::max(epochs, v.size());
  for (const auto& [k, v] : history)
    LS_CHECK(v.size() == epochs, "history plot: series '", k, "' has ", v.size(),
             " values, others have ", epochs, " (one value per epoch)");
  for (size_t i = 0; i < o.phases.size(); ++i) {
    const int first = o.phases[i].first;
    LS_CHECK(i == 0 ? first == 0 : first > o.phases[i - 1].first && first < int(epochs),
             "history plot: phase '", o.phases[i].second, "' starts at epoch index ", first,
             "; phases start in order, the first at 0, each within the ", epochs, " epochs");
  }
  const int cols = std::min<int>(int(names.size()), o.columns > 0 ? o.columns : 3);
  const int rows = (int(names.size()) + cols - 1) / cols;
  HistoryPlot plot;
  Canvas c(cols * o.panel_width, kTitleBand + rows * o.panel_height);
  c.text((c.width - text_width(o.title, 2)) / 2, 14, o.title, kBlack, 2);
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string& name = names[i];
    auto train = history.find(name);
    auto val = history.find("val_" + name);
    const int px = int(i % size_t(cols)) * o.panel_width;
    const int py = kTitleBand + int(i / size_t(cols)) * o.panel_height;
    HistoryPanel p{name, px + kLeft, py + kTop, px + o.panel_width - kRight,
                   py + o.panel_height - kBottom};
    p.epochs = int(epochs);
    p.has_validation = val != history.end();
    std::vector<const std::vector<double>*> series;
    if (train != history.end()) series.push_back(&train->second);
    if (p.has_validation) series.push_back(&val->second);
    std::tie(p.y_min, p.y_max) = value_range(series);
    draw_axes(c, p);
    draw_phases(c, p, o.phases);
    c.text(px + (o.panel_width - text_width(name, 2)) / 2, py + 10, name, kBlack, 2);
    if (train != history.end()) draw_series(c, p, train->second, kTrainColor);
    if (p.has_validation) draw_series(c, p, val->second, kValidationColor);
    draw_legend(c, p, series, o.validation_label);
    plot.panels.push_back(p);
  }
  plot.image = c.image;
  return plot;
}

void save_history_plot(const SeriesMap& history, const std::string& path,
                       const HistoryPlotOptions& options) {
  HistoryPlot plot = render_history_plot(history, options);
  write_file_atomic(path, data::encode_png(plot.image), "history plot");
}

}  // namespace lockstep::viz
