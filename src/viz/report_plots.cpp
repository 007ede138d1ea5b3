// The confusion-matrix heat map and the cost-report chart (lockstep/viz/chart.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "lockstep/core/error.h"
#include "lockstep/core/file_io.h"
#include "lockstep/core/json.h"
#include "lockstep/viz/chart.h"
#include "lockstep/viz/grid.h"

namespace lockstep::viz {

namespace {

constexpr uint8_t kText[3] = {40, 40, 40};
constexpr uint8_t kWhite[3] = {255, 255, 255};

void fill(Tensor& image, int x0, int y0, int x1, int y1, const uint8_t rgb[3]) {
  const int w = int(image.dim(1)), h = int(image.dim(0));
  uint8_t* p = image.data<uint8_t>();
  for (int y = std::max(0, y0); y <= std::min(h - 1, y1); ++y)
    for (int x = std::max(0, x0); x <= std::min(w - 1, x1); ++x)
      std::memcpy(p + (int64_t(y) * w + x) * 3, rgb, 3);
}

std::string cell_text(double v, bool fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, fraction ? "%.2f" : "%.0f", v);
  return buf;
}

}  // namespace

Tensor render_confusion_matrix(const Tensor& counts, const std::vector<std::string>& class_names,
                               const ConfusionMatrixOptions& o) {
  LS_CHECK(
      counts.defined() && counts.rank() == 2 && counts.dim(0) == counts.dim(1) && counts.dim(0) > 0,
      "confusion matrix plot: counts must be a square [C, C] matrix, got ",
      counts.defined() ? counts.shape().str() : std::string("nothing"));
  const int classes = int(counts.dim(0));
  LS_CHECK(class_names.empty() || int(class_names.size()) == classes,
           "confusion matrix plot: ", class_names.size(), " class names for ", classes, " classes");
  std::vector<float> v = counts.contiguous().to_vector();
  std::vector<double> shown(v.begin(), v.end());
  if (o.normalize)
    for (int r = 0; r < classes; ++r) {
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += v[size_t(r * classes + c)];
      for (int c = 0; c < classes; ++c)
        shown[size_t(r * classes + c)] = sum > 0 ? v[size_t(r * classes + c)] / sum : 0;
    }
  const double peak = std::max(1e-12, *std::max_element(shown.begin(), shown.end()));
  auto name = [&](int i) {
    return class_names.empty() ? std::to_string(i) : class_names[size_t(i)];
  };
  int label_width = 0;
  for (int i = 0; i < classes; ++i) label_width = std::max(label_width, text_width(name(i)));
  const int cell = o.cell > 0 ? o.cell : std::max(24, 480 / classes);
  const int left = label_width + 30, top = 40 + label_width + 10;
  const int width = std::max(left + classes * cell + 20, text_width(o.title, 2) + 20);
  const int height = top + classes * cell + 30;
  Tensor image = Tensor::empty(Shape{height, width, 3}, DType::u8);
  std::memset(image.raw(), 255, image.nbytes());
  draw_text(image, (width - text_width(o.title, 2)) / 2, 8, o.title, kText, 2);
  draw_text(image, left, height - 16, "predicted (columns); true (rows)", kText);
  for (int r = 0; r < classes; ++r) {
    const std::string row_name = name(r);
    draw_text(image, left - 6 - text_width(row_name), top + r * cell + cell / 2 - 3, row_name,
              kText);
    for (int c = 0; c < classes; ++c) {
      const double t = shown[size_t(r * classes + c)] / peak;  // 0 white .. 1 dark blue
      const uint8_t rgb[3] = {uint8_t(255 - t * (255 - 8)), uint8_t(255 - t * (255 - 48)),
                              uint8_t(255 - t * (255 - 107))};
      const int x0 = left + c * cell, y0 = top + r * cell;
      fill(image, x0, y0, x0 + cell - 2, y0 + cell - 2, rgb);
      const std::string s = cell_text(shown[size_t(r * classes + c)], o.normalize);
      if (text_width(s) < cell - 2)
        draw_text(image, x0 + (cell - text_width(s)) / 2, y0 + cell / 2 - 3, s,
                  t > 0.5 ? kWhite : kText);
    }
  }
  // Column names, written vertically (one character per line) above the columns.
  for (int c = 0; c < classes; ++c) {
    const std::string col = name(c);
    for (size_t k = 0; k < col.size() && 40 + int(k) * 8 < top - 6; ++k)
      draw_text(image, left + c * cell + cell / 2 - 2, 40 + int(k) * 8, std::string(1, col[k]),
                kText);
  }
  return image;
}

void save_confusion_matrix(const Tensor& counts, const std::vector<std::string>& class_names,
                           const std::string& path, const ConfusionMatrixOptions& options) {
  write_png_atomic(path, render_confusion_matrix(counts, class_names, options));
}

namespace {

// One report's points: (training seconds, dollars, validation accuracy) per epoch.
Series report_series(const json& report, const std::string& x_key, const std::string& fallback) {
  LS_CHECK(report.is_object() && report.contains("epochs") && report["epochs"].is_array(),
           "cost report plot: not a CostReport JSON (no \"epochs\" list)");
  Series s;
  s.name = report.value("label", std::string());
  if (s.name.empty() && report.contains("hardware"))
    s.name = report["hardware"].value("summary", fallback);
  if (s.name.empty()) s.name = fallback;
  for (const json& e : report["epochs"]) {
    if (!e.contains(x_key) || !e.contains("monitor_value")) continue;
    s.x.push_back(e[x_key].get<double>());
    s.y.push_back(e["monitor_value"].is_number() ? e["monitor_value"].get<double>() : NAN);
  }
  return s;
}

}  // namespace

Tensor render_cost_report_plot(const std::vector<json>& reports) {
  LS_CHECK(!reports.empty(), "cost report plot: no reports given");
  const std::string monitor = reports[0].value("monitor", std::string("val_accuracy"));
  LineChart by_time{"Accuracy vs training time", "training time (s)", monitor, {}, {}};
  LineChart by_cost{"Accuracy vs cost", "cost ($)", monitor, {}, {}};
  bool priced = true;
  for (size_t i = 0; i < reports.size(); ++i) {
    const std::string fallback = "run " + std::to_string(i + 1);
    by_time.series.push_back(report_series(reports[i], "train_seconds", fallback));
    // CostReport writes "price_per_hour": null when no price was given.
    const json* price =
        reports[i].contains("price_per_hour") ? &reports[i]["price_per_hour"] : nullptr;
    priced = priced && price && price->is_number() && price->get<double>() > 0;
    if (priced) by_cost.series.push_back(report_series(reports[i], "cost", fallback));
    if (i == 0 && reports[i].contains("thresholds"))
      for (const json& t : reports[i]["thresholds"])
        by_time.y_references.push_back(t.get<double>());
  }
  by_cost.y_references = by_time.y_references;
  Tensor left = render_line_chart(by_time);
  if (!priced) return left;
  Tensor right = render_line_chart(by_cost);
  const int64_t h = left.dim(0), w = left.dim(1);
  Tensor both = Tensor::empty(Shape{h, 2 * w, 3}, DType::u8);
  for (int64_t y = 0; y < h; ++y) {
    uint8_t* row = both.data<uint8_t>() + y * 2 * w * 3;
    std::memcpy(row, left.data<uint8_t>() + y * w * 3, size_t(w * 3));
    std::memcpy(row + w * 3, right.data<uint8_t>() + y * w * 3, size_t(w * 3));
  }
  return both;
}

void save_cost_report_plot(const std::vector<json>& reports, const std::string& path) {
  write_png_atomic(path, render_cost_report_plot(reports));
}

void save_cost_report_plot(const std::vector<std::string>& report_files, const std::string& path) {
  std::vector<json> reports;
  for (const std::string& file : report_files) {
    // A CostReport is a few KB; 16 MiB is far more than any run writes.
    json report = parse_json(read_regular_file(file, 16ull << 20, "CostReport file"),
                             "lockstep report: '" + file + "'");
    LS_CHECK(report.is_object() && report.contains("epochs"), "lockstep report: '", file,
             "' is not a CostReport file (no \"epochs\"; write one with --report FILE.json)");
    reports.push_back(std::move(report));
  }
  save_cost_report_plot(reports, path);
}

int report_command(const std::vector<std::string>& args) {
  const char* usage =
      "usage: lockstep report A.json [B.json ...] -o|--out OUT.png\n"
      "  one line per CostReport file (--report FILE.json of the examples): accuracy against\n"
      "  training seconds, and against dollars when every report has a price\n";
  std::vector<std::string> files;
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-h" || args[i] == "--help") return std::fputs(usage, stdout), 0;
    if (args[i] == "-o" || args[i] == "--out") {
      if (i + 1 >= args.size())
        return std::fprintf(stderr, "lockstep report: %s needs a file\n%s", args[i].c_str(), usage),
               2;
      out = args[++i];
    } else if (args[i].rfind("-", 0) == 0) {
      return std::fprintf(stderr, "lockstep report: unknown option '%s'\n%s", args[i].c_str(),
                          usage),
             2;
    } else {
      files.push_back(args[i]);
    }
  }
  if (files.empty() || out.empty())
    return std::fprintf(stderr, "lockstep report: give report files and -o OUT.png\n%s", usage), 2;
  save_cost_report_plot(files, out);
  std::printf("wrote %s (%zu run%s)\n", out.c_str(), files.size(), files.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace lockstep::viz
