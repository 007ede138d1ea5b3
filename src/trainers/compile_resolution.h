// compile()'s resolution of a CompileConfig against a model's outputs, as a pure function:
// the configuration and the output names in, what the step programs and the fit loop use out
// (each output's loss and loss weight, the loss trackers, every metric with the output it
// watches and its log name). Errors name the argument, the model and its outputs.
#pragma once
#include <string>
#include <vector>

#include "lockstep/trainers/model.h"

namespace lockstep {

struct ResolvedCompile {
  // The configuration with its per-output arguments in the list form (a dict put in the
  // output order, with the defaults for outputs it left out): what Model::compile_config()
  // returns, and what compiles again to the same.
  CompileConfig config;
  std::vector<LossPtr> output_losses;  // [output]; null entries only for an uncompiled model
  std::vector<double> loss_weights;    // [output]
  MetricPtr loss_tracker;              // "loss" (null: not compiled)
  std::vector<MetricPtr> output_loss_trackers;  // "<output>_loss" (several outputs only)
  std::vector<MetricPtr> metrics;               // the plain metrics ...
  std::vector<int> metric_outputs;              // ... and the output each one watches
  std::vector<MetricPtr> weighted_metrics;      // the weighted metrics ...
  std::vector<int> weighted_metric_outputs;     // ... and the output each one watches
  // The log key of each of all_metrics(), as Keras names them ("loss", "<output>_loss",
  // "[<output>_]<metric>", "weighted_<metric>" for a weighted metric whose name is taken).
  std::vector<std::string> metric_log_names;
  // The model's device residence (ModelRuntime's): its programs keep the weights and optimizer
  // slots on a device between steps where the backend can (null: none).
  std::shared_ptr<DeviceResidence> residence;
  // The loss tracker, the output loss trackers, metrics, weighted_metrics (Model::metrics()).
  std::vector<MetricPtr> all_metrics() const;
};

// Throws (naming `model_name` and its outputs) on: steps_per_execution < 1, an unknown
// backend, a per-output list of another length than the outputs, a dict key that is no output,
// an output without a loss in a dict of losses, `loss` together with `losses`, a multi-output
// model given `metrics` (not `output_metrics`), a non-finite loss weight, one metric object in
// both metric_objects and weighted_metric_objects.
ResolvedCompile resolve_compile(const CompileConfig& config, const std::string& model_name,
                                const std::vector<std::string>& output_names);

}  // namespace lockstep
