// Model: a Network (lockstep/nn/network.h: the functional graph of layer calls, or a
// Sequential list) plus training. compile() records the training configuration;
// fit/evaluate/predict compile one static program per (kind, batch size) and run it.
#pragma once
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/graph/backend.h"
#include "lockstep/losses/loss.h"
#include "lockstep/metrics/metric.h"
#include "lockstep/nn/network.h"
#include "lockstep/optimizers/optimizer.h"
#include "lockstep/trainers/callback_base.h"
#include "lockstep/trainers/model_data.h"

namespace lockstep {

/// A compile() argument with one entry per model output, in either of Keras's forms: a list, in
/// the order of Model::output_names(), or a dict keyed by output name (an output left out of
/// the dict gets loss weight 1 and no metrics; every output needs a loss). A dict key that is
/// no output is an error.
///   .losses = {losses::get("mse"), losses::get("mae")}             // list
///   .loss_weights = {{"cls", 2.0}}                                  // dict: "reg" weighs 1
///   .output_metrics = PerOutput<std::vector<std::string>>::by_name({{"reg", {"mae"}}})
/// (a dict of metric lists needs by_name: {{"reg", {"mae"}}} also reads as a list of lists.)
template <typename T>
class PerOutput {
 public:
  PerOutput() = default;  ///< Empty (the list form, no entries).
  /// The list form: {a, b}, one entry per output in output order.
  PerOutput(std::initializer_list<T> list) : list_(list) {}  // NOLINT
  /// The list form from a vector.
  PerOutput(std::vector<T> list) : list_(std::move(list)) {}  // NOLINT
  /// The dict form: {{"cls", a}, {"reg", b}}.
  PerOutput(std::initializer_list<std::pair<const std::string, T>> by_name)  // NOLINT
      : by_name_(by_name), keyed_(true) {}
  /// The dict form from a map.
  PerOutput(std::map<std::string, T> by_name)  // NOLINT
      : by_name_(std::move(by_name)), keyed_(true) {}
  /// The dict form, spelt out (needed where {{"reg", {"mae"}}} would read as a list).
  static PerOutput by_name(std::map<std::string, T> entries) {
    return PerOutput(std::move(entries));
  }

  bool keyed() const { return keyed_; }  ///< True for the dict form.
  /// No entries (in whichever form).
  bool empty() const { return keyed_ ? by_name_.empty() : list_.empty(); }
  /// The number of entries (in whichever form).
  size_t size() const { return keyed_ ? by_name_.size() : list_.size(); }
  /// The list form's entries (empty in the dict form).
  const std::vector<T>& list() const { return list_; }
  /// The dict form's entries (empty in the list form).
  const std::map<std::string, T>& dict() const { return by_name_; }
  /// The dict form's entry for an output (an empty list turns into the dict form).
  T& operator[](const std::string& output) {
    LS_CHECK(keyed_ || list_.empty(), "PerOutput: holds a list of ", list_.size(),
             " entries; index it by position, or assign a dict first");
    keyed_ = true;
    return by_name_[output];
  }
  /// Removes the dict form's entry for `output`; returns how many were removed (0 or 1).
  size_t erase(const std::string& output) { return by_name_.erase(output); }
  /// True when this is the list form with exactly these entries.
  bool operator==(const std::vector<T>& list) const { return !keyed_ && list_ == list; }
  bool operator==(const PerOutput& other) const = default;  ///< Same form, same entries.

 private:
  std::vector<T> list_;
  std::map<std::string, T> by_name_;
  bool keyed_ = false;
};

/// Model::compile's arguments (keras model.compile): the optimizer, the loss, the metrics and,
/// for several outputs, each output's loss, weight and metrics.
///
///   model.compile({.optimizer = ls::optimizers::Adam(1e-3),
///                  .loss = ls::losses::MeanSquaredError(), .metrics = {"mae"}});
struct CompileConfig {
  OptimizerPtr optimizer;  ///< required: optimizers::Adam(1e-3), optimizers::get("adam"), ...
  LossPtr loss;            ///< losses::MeanSquaredError(), losses::get("mse"), your own Loss
  std::vector<std::string> metrics;  ///< Keras strings: "accuracy", "top_k" ...
  /// Metrics as objects (a configured or your own Metric), logged after `metrics`.
  std::vector<MetricPtr> metric_objects;
  /// Keras weighted_metrics: updated with the batch's sample weights (sample_weight,
  /// class_weight, or a Dataset's third element); without weights they equal their unweighted
  /// twins. A name already taken by `metrics` is logged as "weighted_<name>", as in Keras.
  std::vector<std::string> weighted_metrics;
  /// weighted_metrics as objects.
  std::vector<MetricPtr> weighted_metric_objects;
  /// Several outputs, each a list (one entry per model output, in the order of
  /// Model::outputs()) or a dict keyed by output name (PerOutput). `losses`: each output's loss
  /// (leave it empty and `loss` applies to every output, as Keras's single loss does).
  /// `loss_weights`: each output's weight in the total loss (default 1 each; a single-output
  /// model may pass one). `output_metrics` / `output_metric_objects` /
  /// `output_weighted_metrics`: each output's metrics (Keras's list of lists; a multi-output
  /// model takes its metrics only here). The logs then use Keras 3's names: "loss" =
  /// sum(loss_weight * output loss) + the layers' losses, `"<output>_loss"` (each output's loss,
  /// without its loss weight) and `"<output>_<metric>"`, where `<output>` is the name of the
  /// layer that computes the output (Model::output_names()).
  PerOutput<LossPtr> losses;
  PerOutput<double> loss_weights;  ///< each output's weight in "loss" (default 1)
  PerOutput<std::vector<std::string>> output_metrics;  ///< each output's metrics, by name
  /// each output's metrics, as objects
  PerOutput<std::vector<MetricPtr>> output_metric_objects;
  /// each output's weighted metrics, by name
  PerOutput<std::vector<std::string>> output_weighted_metrics;
  /// fit, evaluate and predict stage this many batches and run them in one call into the
  /// compiled step (Keras's; the batch callbacks see each execution once); results as with 1.
  int steps_per_execution = 1;
  /// Keras's run_eagerly: op by op with fresh buffers (CompileOptions::eager), for debugging.
  bool run_eagerly = false;
  /// The kernels' backend (CompileOptions::backend): "cpu" (default), "reference" or "xla".
  std::string backend = "cpu";
  bool verbose_compile = false;  ///< print the compiler's report (fusions, memory)
};

namespace distribute {
class StrategyImpl;
}  // namespace distribute

/// Model::fit's keyword arguments (keras model.fit), with Keras's defaults.
struct FitConfig {
  int batch_size = 32;  ///< arrays only (a Dataset is already batched); the global batch
  int epochs = 1;       ///< train until this epoch (counting from 0, so with initial_epoch too)
  int verbose = 1;      ///< 0 silent, 1 progress bar, 2 one line per epoch
  std::vector<CallbackPtr> callbacks;  ///< run in order at each epoch / batch boundary
  /// Arrays only: the last fraction in [0, 1) of the rows (before shuffling) is held out for
  /// validation, as in Keras; 0 (default): none.
  double validation_split = 0.0;
  ValidationData validation_data;  ///< (x, y), or a Dataset of batches
  bool shuffle = true;             ///< arrays only (a Dataset shuffles itself)
  int initial_epoch = 0;           ///< the epoch to start at (to resume a run); default 0
  /// 0 = the whole data each epoch (a fresh dataset iterator per epoch). > 0: this many steps
  /// per epoch; a Dataset's iterator then continues across epochs (so repeat()ed, infinite
  /// datasets work) and restarts only when it runs out.
  int64_t steps_per_epoch = 0;
  uint64_t seed = 0;  ///< shuffle seed
  /// Keras's weighted training (arrays; a Dataset's elements carry weights as their third
  /// component). sample_weight [N]: each sample's weight; the loss is the Keras
  /// "sum_over_batch_size" reduction sum(loss * w) / batch_size, and weighted_metrics become
  /// sum(value * w) / sum(w). class_weight {class: weight}: each sample weighs its label's
  /// class weight (1 for classes not listed; one-hot labels by their argmax); it applies to the
  /// training data only. Not both at once (as in Keras). validation_split splits sample_weight
  /// like x and y.
  Tensor sample_weight;
  std::map<int, double> class_weight;  ///< see sample_weight
  /// Keras's per-output sample weights (several outputs): one [N] array per output (the list
  /// form, in the model's output order; an undefined entry weighs 1), or keyed by output name
  /// (an output left out weighs 1). Output o's loss and its weighted_metrics use its weights
  /// (the loss as above, sum(loss_o * w_o) / batch_size). Instead of sample_weight and
  /// class_weight; validation_split splits them too.
  std::vector<Tensor> output_sample_weights;
  /// The dict form of output_sample_weights: [N] weights keyed by output name.
  std::map<std::string, Tensor> sample_weight_by_output;
};

/// Model::evaluate's keyword arguments (keras model.evaluate).
struct EvaluateConfig {
  int batch_size = 32;   ///< arrays only; a Dataset is already batched
  int verbose = 1;       ///< 0 silent, 1 progress bar
  int64_t steps = 0;     ///< Dataset: 0 = until the end
  Tensor sample_weight;  ///< arrays: per-sample weights [N] (see FitConfig::sample_weight)
  /// arrays: per-output weights (see FitConfig::output_sample_weights), instead of sample_weight.
  std::vector<Tensor> output_sample_weights;
  /// arrays: per-output weights keyed by output name.
  std::map<std::string, Tensor> sample_weight_by_output;
  /// on_test_begin / on_test_batch_begin / on_test_batch_end (running metrics) / on_test_end.
  std::vector<CallbackPtr> callbacks;
};

/// Model::predict's keyword arguments (keras model.predict).
struct PredictConfig {
  int batch_size = 32;  ///< arrays only; a Dataset is already batched
  int verbose = 0;      ///< 0 silent (default), 1 progress bar
  /// on_predict_begin / on_predict_batch_begin / on_predict_batch_end / on_predict_end.
  std::vector<CallbackPtr> callbacks;
};

/// train_on_batch / test_on_batch's weights (Keras's arguments; not both).
struct BatchWeights {
  Tensor sample_weight;                ///< [batch]: each row's weight
  std::map<int, double> class_weight;  ///< train_on_batch only
  /// Per-output weights (see FitConfig::output_sample_weights), instead of the two above.
  std::vector<Tensor> output_sample_weights;
  /// Per-output weights keyed by output name.
  std::map<std::string, Tensor> sample_weight_by_output;
};

/// keras model.load_weights(path, skip_mismatch=..., by_name=...).
struct LoadWeightsOptions {
  /// Leave a layer as it is, with a warning on stderr, when the file's weights for it differ in
  /// number or shape, instead of failing (Keras's skip_mismatch; here a layer is loaded whole
  /// or not at all).
  bool skip_mismatch = false;
  /// Legacy .h5 files: match the file's layer groups to the model's layers (model.layers, a
  /// nested model as one layer) by name, as Keras's by_name=True: model layers the file lacks
  /// keep their weights (a new head on a pretrained backbone), file layers the model lacks are
  /// ignored; at least one layer must match. false: layer by layer in order among the layers
  /// with weights, which must then agree in number (Keras 3's default for .h5).
  bool by_name = true;
};
/// What load_weights did (layer names).
struct LoadWeightsReport {
  std::vector<std::string> loaded;       ///< layers whose weights were set
  std::vector<std::string> skipped;      ///< layers left as they were (skip_mismatch), and why
  std::vector<std::string> not_in_file;  ///< layers with weights the file has none for (by_name)
};

class ModelRuntime;  ///< compiled state: programs, replication, fit progress (src/trainers)

/// What one compiled train step holds in memory while it runs, from the memory planner
/// (Model::step_memory): the number that says whether a batch size or a sequence length fits.
struct StepMemory {
  int64_t batch_size = 0;      ///< the rows the step was compiled for
  size_t arena_bytes = 0;      ///< the intermediates (activations, gradients), planned with reuse
  size_t workspace_bytes = 0;  ///< the kernels' shared scratch block
  size_t variable_bytes = 0;   ///< weights, optimizer slots and metric accumulators
  size_t peak_bytes = 0;       ///< their sum: the step's peak
  int replicas = 1;            ///< programs the batch is split over (thread replicas), summed here
  /// False on a whole-graph backend (xla): its plugin plans the device memory, so the arena is
  /// unknown here and peak_bytes counts the variables alone.
  bool planned = true;
  /// Per device, as the backend's compiler planned the step (xla: the PJRT plugin's compiled
  /// memory stats; under a distribution, one device's share); device.devices = 0 when unknown.
  DeviceMemory device;
};

/// keras.Model: a Network (its layers and graph) that can be compiled, trained, evaluated, used
/// to predict, and saved. Build it from the symbolic tensors of a functional model or with
/// Sequential(); then compile(), fit(), evaluate(), predict().
///
///   ls::Model model = ls::Sequential({Input({28, 28, 1}), Flatten(), Dense(10)});
///   model.compile({.optimizer = ls::optimizers::Adam(1e-3),
///                  .loss = ls::losses::SparseCategoricalCrossentropy({.from_logits = true}),
///                  .metrics = {"accuracy"}});
///   model.fit(x_train, y_train, {.batch_size = 128, .epochs = 5, .validation_split = 0.1});
///
/// (docs/examples/quickstart.cpp is this program in full.) Created inside a distribute
/// strategy's scope(), it trains replicated under that strategy. Move-only.
class Model : public Network {
 public:
  Model();  ///< An empty model (to assign or load into).
  /// keras.Model(inputs, outputs): the functional model from the Input tensors to the outputs.
  Model(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name = "");
  Model(Network network);  ///< NOLINT: a Sequential or functional network becomes trainable
  /// keras.Model(input, output): one input, one output.
  Model(KTensor input, KTensor output, std::string name = "")
      : Model(std::vector<KTensor>{input}, std::vector<KTensor>{output}, std::move(name)) {}
  ~Model();
  Model(Model&&) noexcept;             ///< Moves the layers, the compile state and programs.
  Model& operator=(Model&&) noexcept;  ///< Moves the layers, the compile state and programs.

  /// Under a strategy (the model was created, or is compiled, inside strategy.scope()) every
  /// program is built once per local replica and fit splits each global batch across them.
  void compile(CompileConfig config);

  /// x and y (ModelData, lockstep/trainers/model_data.h) in any of Keras's forms: arrays (one per
  /// model input / output, in the model's order: inputs() / outputs(); one Tensor for a
  /// single-input, single-output model), a dict keyed by input / output name, or a Dataset (y
  /// then stays empty). Every array has the same number of rows. A sample_weight [N] applies to
  /// every output's loss and weighted metrics (class_weight needs a single output, as in Keras;
  /// per-output weights: FitConfig::output_sample_weights).
  ///
  /// A Dataset yields batched {x, y[, sample_weight]} elements; for I inputs and O outputs flat
  /// {x_1, ..., x_I, y_1, ..., y_O[, sample_weight]} or {..., y_O, w_1, ..., w_O} (inputs, then
  /// targets, then the optional weights, for every output or one per output; predict takes
  /// {x_1..x_I} and ignores further components). fit's Dataset is a global batch under a
  /// strategy; under a multi-worker strategy fit shards it across workers with
  /// distribute_dataset's AUTO policy, unless it is a DistributedDataset (distribute_dataset /
  /// distribute_datasets_from_function). The History and the epoch logs carry
  /// "input_wait_seconds" (time the steps waited for the next batch) and "input_wait_fraction"
  /// (of the epoch's step time).
  History fit(ModelData x, ModelData y = {}, FitConfig config = {});
  /// fit(x, {}, config): for a Dataset, which carries its own targets.
  History fit(ModelData x, FitConfig config) { return fit(std::move(x), {}, std::move(config)); }
  /// keras model.evaluate: the loss and metrics over x and y (arrays, dicts or a Dataset, as in
  /// fit), their values after the last batch: {"loss": ..., "accuracy": ...}.
  Logs evaluate(ModelData x, ModelData y = {}, EvaluateConfig config = {});
  /// evaluate(x, {}, config): for a Dataset.
  Logs evaluate(ModelData x, EvaluateConfig config) {
    return evaluate(std::move(x), {}, std::move(config));
  }
  /// One prediction per model output (Prediction). x as one Tensor needs a single-output model;
  /// pass a list ({x}) for every output of a single-input model.
  Prediction predict(ModelData x, PredictConfig config = {});
  /// predict with only batch_size and verbose set.
  Prediction predict(ModelData x, int batch_size, int verbose = 0) {
    return predict(std::move(x), PredictConfig{.batch_size = batch_size, .verbose = verbose});
  }
  /// Keras's *_on_batch: one step on exactly this batch of arrays (split across the local
  /// replicas; under several workers every worker passes the same global batch). The metrics
  /// are reset first, so the logs are this batch's: loss and metrics after train_on_batch's step
  /// (computed with the weights before its update, as in fit), and test_on_batch's evaluation.
  /// No callbacks run.
  Logs train_on_batch(ModelData x, ModelData y = {}, BatchWeights weights = {});
  /// keras test_on_batch: the loss and metrics of this one batch, no update.
  Logs test_on_batch(ModelData x, ModelData y = {}, BatchWeights weights = {});
  /// keras predict_on_batch: the outputs for this one batch (rows as x's).
  Prediction predict_on_batch(ModelData x);

  /// The names of the layers computing the outputs (Keras's output_names: the log prefixes of a
  /// multi-output model), and each output's loss and loss weight as compile() resolved them.
  std::vector<std::string> output_names() const;
  std::vector<std::string> input_names() const;  ///< the Input layers' names (TensorDict keys)
  /// Each output's loss after compile() (in output order; the single loss repeated when one
  /// was given).
  const std::vector<LossPtr>& output_losses() const;
  /// Each output's loss weight after compile() (in output order; 1 where none was given).
  const std::vector<double>& loss_weights() const;

  /// Checkpoints (lockstep/io/checkpoint.h): weights only, or weights + optimizer state +
  /// progress. Strategy-agnostic: one copy of the weights, loadable under any replica count.
  /// "*.h5" (e.g. "x.weights.h5"): Keras's .weights.h5 layout (lockstep/saving/saving.h).
  /// Keras files load with keras's skip_mismatch and by_name (lockstep/saving/saving.h): the
  /// legacy .h5 layout of keras.applications' published weights too.
  void save_weights(const std::string& path) const;
  /// Loads what save_weights wrote, Keras's .weights.h5, or a legacy Keras 2 .h5 (read by layer
  /// name by default) into this model; an error names the first layer whose weights do not match
  /// (both shapes) unless options.skip_mismatch. Returns what was loaded and skipped.
  LoadWeightsReport load_weights(const std::string& path, const LoadWeightsOptions& options = {});
  /// keras model.save: a Keras 3 .keras file with the compile config and the optimizer's state
  /// (lockstep/saving/saving.h).
  void save(const std::string& path) const;
  /// keras model.to_json(): the Keras 3 model config as JSON text (network_from_json reads it).
  std::string to_json() const { return get_config().dump(); }
  /// The strategy this model is replicated by (nullptr: none).
  const std::shared_ptr<distribute::StrategyImpl>& strategy() const { return strategy_; }
  /// Where the next fit() starts (set by BackupAndRestore in on_train_begin): epoch and step
  /// within it. Cleared by fit() once used.
  void set_resume_point(int epoch, int64_t step);

  /// Keras's model.stop_training: a callback sets it (EarlyStopping, TerminateOnNaN) and fit
  /// stops after the current batch; fit clears it when it starts.
  bool stop_training = false;

  /// Keras's model.summary() table and, once a train step is compiled (step_memory(batch) before
  /// fit, or fit), that step's planned peak memory on a last line (compiled_step_memory; the
  /// largest step so far). It compiles nothing itself: call step_memory(batch) first to see it.
  /// Under a distribution it also shows each weight's layout and its bytes per device, the
  /// optimizer state per device, and, on a backend whose compiler says (xla), the step's
  /// per-device memory as compiled: arguments, intermediates, outputs and the peak.
  void summary(std::ostream& os) const;
  void summary() const;  ///< ... on stdout
  /// The train step's memory for `batch_size` rows, as the memory planner laid it out:
  /// compiles that step (the programs fit then runs at this batch size, one per thread replica
  /// when fit splits the batch over them) if it is not yet. Needs compile(). A step whose
  /// intermediates exceed the machine's memory fails here, naming them, before fit runs.
  StepMemory step_memory(int64_t batch_size);
  /// The memory of the largest train step compiled so far (by fit or step_memory), else nullopt.
  std::optional<StepMemory> compiled_step_memory() const;

  /// The configuration compile() got, its per-output arguments in the list form.
  const CompileConfig& compile_config() const;
  /// Seconds spent compiling programs so far, and how many were compiled.
  double compile_seconds() const;
  int programs_compiled() const;  ///< Programs compiled so far (one per kind and batch size).
  /// The running fit() so far (reset when fit starts): samples this process's replicas stepped
  /// on and seconds in its epochs' steps (compile and validation excluded). Callbacks read it
  /// (CostReport).
  struct FitProgress {
    int64_t samples = 0;       ///< examples this process's replicas have stepped on
    double train_seconds = 0;  ///< seconds in the epochs' train steps
  };
  const FitProgress& fit_progress() const;  ///< The running (or last) fit's progress.
  /// The loss tracker first, then (several outputs) each output's loss tracker, then metrics,
  /// weighted_metrics.
  std::vector<MetricPtr> metrics() const;
  /// The log key of each of metrics() (its name, or "weighted_<name>" for a weighted metric
  /// whose name a plain one already has, as Keras names them).
  std::vector<std::string> metric_log_names() const;
  struct Source;  ///< internal: where fit/evaluate take batches from (src/trainers/fit_source.h)

 private:
  History fit_arrays(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, FitConfig cfg);
  History fit_dataset(const data::Dataset& dataset, FitConfig cfg, bool distributed);
  History fit_loop(Source& source, FitConfig& cfg);  ///< runs a FitLoop
  Logs evaluate_arrays(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                       EvaluateConfig cfg, const char* fn);
  Logs evaluate_dataset(const data::Dataset& dataset, const EvaluateConfig& cfg);
  Logs evaluate_loop(Source& source, int verbose, const std::vector<CallbackPtr>& callbacks = {});
  std::vector<Tensor> predict_arrays(const std::vector<Tensor>& xs, const PredictConfig& config);
  std::vector<Tensor> predict_dataset(const data::Dataset& dataset, const PredictConfig& config);
  Logs train_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                   BatchWeights weights);
  std::shared_ptr<distribute::StrategyImpl> strategy_;
  std::unique_ptr<ModelRuntime> runtime_;
};

/// keras.Sequential: the first item must be an Input (so shapes are known when built).
Model Sequential(std::vector<SequentialItem> items, std::string name = "sequential");

}  // namespace lockstep
