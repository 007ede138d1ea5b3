// Charts as PNG in the built-in 5x7 font: an x-y line chart (several named series, axes with
// tick labels, a legend, dashed reference lines), a confusion-matrix heat map, and the
// time-and-cost chart of one or more CostReport files.
//
//   viz::save_confusion_matrix(metrics::confusion_matrix(y_test, model.predict(x_test)),
//                              class_names, "confusion.png");
//   viz::save_cost_report_plot({"a100.json", "cpu.json"}, "cost.png");
//
// Every save_ function writes atomically (temporary file, then rename); errors name the path.
#pragma once
#include <string>
#include <vector>

#include "lockstep/core/json.h"
#include "lockstep/core/tensor.h"

namespace lockstep::viz {

/// One line of a LineChart: points (x[i], y[i]); non-finite points are skipped.
struct Series {
  std::string name;  ///< legend entry ("" = none)
  ///@{
  /// The points' coordinates (same length).
  std::vector<double> x, y;
  ///@}
};

/// A line chart: axes with ticks and labels, a legend, dashed reference lines.
struct LineChart {
  ///@{
  /// The title above the plot and the axes' labels.
  std::string title, x_label, y_label;
  ///@}
  std::vector<Series> series;        ///< drawn in matplotlib's colour cycle
  std::vector<double> y_references;  ///< dashed horizontal lines (e.g. accuracy thresholds)
  ///@{
  /// The image's size in pixels.
  int width = 560, height = 400;
  ///@}
};

/// uint8 [height, width, 3]. Throws when no series has a finite point.
Tensor render_line_chart(const LineChart& chart);
/// render_line_chart, written as a PNG (atomically).
void save_line_chart(const LineChart& chart, const std::string& path);

/// How render_confusion_matrix draws.
struct ConfusionMatrixOptions {
  std::string title = "Confusion matrix";  ///< above the matrix
  /// true: each row divided by its sum (the colour and the printed value are fractions).
  bool normalize = false;
  int cell = 0;  ///< pixels per cell; 0: fit about 480 px (at least 24)
};
/// counts: [C, C] (row = true class, column = predicted, as metrics::confusion_matrix gives);
/// class_names: C names or empty (indices). Cells are shaded white to blue by value, with the
/// count (or fraction) printed in each.
Tensor render_confusion_matrix(const Tensor& counts, const std::vector<std::string>& class_names,
                               const ConfusionMatrixOptions& options = {});
/// render_confusion_matrix, written as a PNG (atomically).
void save_confusion_matrix(const Tensor& counts, const std::vector<std::string>& class_names,
                           const std::string& path, const ConfusionMatrixOptions& options = {});

/// The time-and-cost chart of CostReport JSON reports (lockstep/callbacks/cost_report.h): one line
/// per report, its monitored accuracy against training seconds (left) and against dollars (right,
/// when every report has a price), with the reports' thresholds as dashed lines. A report's
/// legend entry is its "label" (else its hardware line).
Tensor render_cost_report_plot(const std::vector<json>& reports);
/// render_cost_report_plot, written as a PNG (atomically).
void save_cost_report_plot(const std::vector<json>& reports, const std::string& path);
/// The same from report files (what `lockstep report a.json b.json -o cmp.png` runs); errors
/// name the file that is missing or not a cost report.
void save_cost_report_plot(const std::vector<std::string>& report_files, const std::string& path);

/// `lockstep report A.json [B.json ...] -o OUT.png`: the command's arguments after its name;
/// returns the exit status (0; 2 on a usage error, with the usage on stderr; --help: usage on
/// stdout). Errors in the files throw (naming the file).
int report_command(const std::vector<std::string>& args);

/// Writes a uint8 [H, W, 3] image as PNG atomically (temporary file in the same folder, rename).
void write_png_atomic(const std::string& path, const Tensor& image);

}  // namespace lockstep::viz
