// Training curves as a PNG (what a Keras user draws with matplotlib from history.history):
// one panel per quantity — loss first, then each metric, learning_rate last — with the
// training line (blue) and, when the history has "val_<name>", the validation line (orange),
// per epoch; axes with tick labels, a legend and a title, in the built-in 5x7 font.
//
//   History h = model.fit(...);
//   viz::save_history_plot(h.history, "curves.png");   // History::history is a SeriesMap
//
// NaN and infinite values leave a gap in their line. Keys listed in `exclude` (by default
// fit's input_wait_* timing logs) get no panel.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::viz {

/// name -> one value per epoch (History::history's type).
using SeriesMap = std::map<std::string, std::vector<double>>;

/// How render_history_plot draws: one panel per metric, training and validation lines.
struct HistoryPlotOptions {
  std::string title = "Training history";  ///< above the panels
  int panel_width = 440;                   ///< pixels per panel, axes and labels included
  int panel_height = 320;                  ///< pixels per panel
  int columns = 0;                         ///< panels per row; 0: up to 3
  /// Logs not plotted.
  std::vector<std::string> exclude = {"input_wait_seconds", "input_wait_fraction"};
  std::string validation_label = "validation";  ///< the val_ line's legend entry (e.g. "test")
  /// Training phases of one run (transfer learning: "head", then "fine-tune"), each as (its
  /// first epoch's index, its name), in order, the first at 0: a dashed line in kPhaseColor
  /// between the last epoch of one phase and the first of the next, and each phase's name at
  /// the top of every panel where it starts. Empty: one phase, nothing drawn.
  std::vector<std::pair<int, std::string>> phases;
};

/// The phase boundary's colour (RGB).
inline constexpr uint8_t kPhaseColor[3] = {44, 160, 44};  ///< matplotlib's C2

/// Line colours (RGB).
inline constexpr uint8_t kTrainColor[3] = {31, 119, 180};       ///< matplotlib's C0
inline constexpr uint8_t kValidationColor[3] = {255, 127, 14};  ///< matplotlib's C1

/// One panel's plot area and scales: pixel(epoch_index, value) is where that point is drawn.
struct HistoryPanel {
  std::string name;  ///< the metric ("loss", "accuracy")
  ///@{
  /// The plot area, inclusive pixels.
  int left = 0, top = 0, right = 0, bottom = 0;
  ///@}
  ///@{
  /// The value axis' range.
  double y_min = 0, y_max = 1;
  ///@}
  int epochs = 0;                                                  ///< points per line
  bool has_validation = false;                                     ///< a val_ line is drawn too
  std::pair<int, int> pixel(int epoch_index, double value) const;  ///< (x, y)
};

/// render_history_plot's result: the picture and where each panel is.
struct HistoryPlot {
  Tensor image;                      ///< uint8 [H, W, 3]
  std::vector<HistoryPanel> panels;  ///< in drawing order
};

/// Throws when `history` has no series to plot or the series differ in length (naming them).
HistoryPlot render_history_plot(const SeriesMap& history, const HistoryPlotOptions& options = {});
/// Renders and writes a PNG atomically (temporary file, then rename); errors name the path.
void save_history_plot(const SeriesMap& history, const std::string& path,
                       const HistoryPlotOptions& options = {});

}  // namespace lockstep::viz
