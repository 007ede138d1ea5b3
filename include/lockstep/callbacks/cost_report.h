// The time-and-cost report of a training run: what a run costs on one machine against
// another (e.g. an instance at $3.93/h against one at $12.88/h: the cheaper hour is not always
// the cheaper run).
//
//   auto report = callbacks::CostReport({.path = "out/report.json", .price_per_hour = 3.93});
//   model.fit(train, {.epochs = 10, .validation_data = val, .callbacks = {report}});
//   // out/report.json and out/report.png; compare runs: viz::save_cost_report_plot(
//   //   std::vector<std::string>{"a.json", "b.json"}, "cmp.png")  (lockstep report a b -o cmp.png)
//
// Per epoch it records the wall time since fit began (compile, steps and validation), the
// training time (the steps only, as History::train_seconds), images/s and `monitor` (default
// val_accuracy); the first epoch at which the monitor reaches each threshold gives the time
// (and, with a price, the cost) to that threshold. Cost is price_per_hour × wall hours. It
// also records the compile time, peak resident memory (getrusage), the compiled train step's
// planned peak memory ("step_memory": Model::compiled_step_memory, the memory planner's arena,
// the kernels' scratch, weights and optimizer state) and the hardware: CPU model
// (/proc/cpuinfo), cores, replicas and workers. The JSON is rewritten atomically at every epoch
// end (a stopped run keeps its report); the PNG (accuracy against time and against dollars)
// and a printed summary come at the end of training. Under several workers only the chief
// writes.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/callbacks/callback.h"
#include "lockstep/core/json.h"

namespace lockstep {

/// callbacks::CostReport's options: where to write, what to watch, what the machine costs.
struct CostReportOptions {
  std::string path;      ///< the JSON report ("" = keep it in memory only)
  std::string png_path;  ///< "" = path with .json replaced by .png ("" path: no picture)
  std::vector<double> thresholds = {0.85, 0.90, 0.91};  ///< accuracies to time and price
  /// The log to compare with the thresholds; "val_accuracy" falls back to the first validation
  /// log whose name contains "acc" (e.g. val_sparse_categorical_accuracy), then to "accuracy".
  std::string monitor = "val_accuracy";
  /// When set: the monitored value of each epoch comes from this function (named `monitor`),
  /// e.g. a test-set accuracy the caller evaluates itself in an earlier callback.
  std::function<double(int epoch, const Logs& logs)> monitor_fn;
  /// Dollars per hour of the machine; or a JSON file of named prices {"a100": 3.93, ...} and the
  /// machine's name in it (may be omitted when the file names one machine).
  double price_per_hour = 0;
  std::string prices_file;  ///< a JSON table {"machine": dollars_per_hour, ...}
  std::string machine;      ///< the machine's entry in prices_file
  std::string label;        ///< the run's legend entry in charts ("" = the hardware line)
  int verbose = 1;          ///< 1: print the summary at the end of training
};

/// The callback callbacks::CostReport returns; report() reads its figures.
class CostReportCallback : public Callback {
 public:
  virtual json report() const = 0;  ///< the report so far
  /// Makes the next fit a named phase of one run (transfer learning: "head", then
  /// "fine-tune"): call it before each fit, the first included, and pass this same callback
  /// to each. A later phase's epochs are appended to the earlier ones' (each tagged "phase"),
  /// the clock, the training time and the sample count carry on, and the report gains
  /// "phases" (per phase: epochs, wall and training seconds, samples, images/s, compile
  /// seconds, cost) while its top-level figures are the totals. Without it each fit starts
  /// a new report.
  virtual void begin_phase(const std::string& name) = 0;
};

/// Reads /proc/cpuinfo's first "model name" (or "unknown").
std::string cpu_model_name();
/// Peak resident memory of this process in MiB (getrusage's ru_maxrss).
double peak_rss_mb();
/// The price of `machine` in a JSON price table file (errors name the file and the machines).
double price_from_table(const std::string& prices_file, const std::string& machine);

namespace callbacks {
/// Records wall and training time, images/s, peak memory and the hardware, and the time and
/// dollars until `monitor` first reaches each threshold; writes JSON and a PNG chart at the end
/// (on the chief only).
std::shared_ptr<CostReportCallback> CostReport(CostReportOptions options = {});
}  // namespace callbacks

}  // namespace lockstep
