// Model: a Network (lockstep/nn/network.h: the functional graph of layer calls, or a
// Sequential list) plus training. compile() records the training configuration;
// fit/evaluate/predict compile one static program per (kind, batch size) and run it.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "lockstep/data/dataset.h"
#include "lockstep/nn/network.h"
#include "lockstep/train/callback.h"
#include "lockstep/train/loss.h"
#include "lockstep/train/metric.h"
#include "lockstep/train/optimizer.h"

namespace lockstep {

struct CompileConfig {
  OptimizerPtr optimizer;
  LossPtr loss;
  std::vector<std::string> metrics;  // Keras strings: "accuracy", "top_k" ...
  std::vector<MetricPtr> metric_objects;
  // Keras weighted_metrics: updated with the batch's sample weights (sample_weight,
  // class_weight, or a Dataset's third element); without weights they equal their unweighted
  // twins. A name already taken by `metrics` is logged as "weighted_<name>", as in Keras.
  std::vector<std::string> weighted_metrics;
  std::vector<MetricPtr> weighted_metric_objects;
  // Several outputs (Keras's list forms; one entry per model output, in the order of
  // Model::outputs()). `losses`: each output's loss (leave it empty and `loss` applies to every
  // output, as Keras's single loss does). `loss_weights`: each output's weight in the total
  // loss (default 1 each; a single-output model may pass one). `output_metrics` /
  // `output_metric_objects` / `output_weighted_metrics`: each output's metrics (Keras's list of
  // lists; a multi-output model takes its metrics only here). The logs then use Keras 3's
  // names: "loss" = sum(loss_weight * output loss) + the layers' losses, "<output>_loss" (each
  // output's loss, without its loss weight) and "<output>_<metric>", where <output> is the
  // name of the layer that computes the output (Model::output_names()).
  std::vector<LossPtr> losses;
  std::vector<double> loss_weights;
  std::vector<std::vector<std::string>> output_metrics;
  std::vector<std::vector<MetricPtr>> output_metric_objects;
  std::vector<std::vector<std::string>> output_weighted_metrics;
  // Keras's dict forms of the above, keyed by output name (Model::output_names()); each
  // instead of its list form. Every output needs a loss; an output left out of the other maps
  // gets loss weight 1 and no metrics. A name that is not an output is an error.
  std::map<std::string, LossPtr> loss_by_output;
  std::map<std::string, double> loss_weight_by_output;
  std::map<std::string, std::vector<std::string>> metrics_by_output;
  std::map<std::string, std::vector<MetricPtr>> metric_objects_by_output;
  std::map<std::string, std::vector<std::string>> weighted_metrics_by_output;
  // fit, evaluate and predict stage this many batches and run them in one call into the
  // compiled step (Keras's; the batch callbacks see each execution once); results as with 1.
  int steps_per_execution = 1;
  bool run_eagerly = false;
  std::string backend = "cpu";
  bool verbose_compile = false;  // print the compiler's report (fusions, memory)
};

namespace distribute {
class StrategyImpl;
class DistributedDataset;
}  // namespace distribute

// Keras's dict structure for data: one array per model input (or output), keyed by its name
// (Model::input_names() / output_names()); a key that is no input (output), or an input
// (output) without a key, is an error.
struct TensorDict {
  TensorDict() = default;
  TensorDict(std::initializer_list<std::pair<const std::string, Tensor>> items) : tensors(items) {}
  TensorDict(std::map<std::string, Tensor> items) : tensors(std::move(items)) {}  // NOLINT
  std::map<std::string, Tensor> tensors;
};

// fit's validation data: arrays (x, y[, sample_weight]) or a Dataset of batched {x, y[, w]}
// elements (a multi-input / multi-output model: {x_1..x_I, y_1..y_O[, w]} elements, see
// Model), or, for a multi-input / multi-output model, arrays xs and ys (ValidationData::arrays).
struct ValidationData {
  ValidationData() = default;
  ValidationData(Tensor x_, Tensor y_, Tensor sample_weight_ = {})
      : x(std::move(x_)), y(std::move(y_)), sample_weight(std::move(sample_weight_)) {}
  ValidationData(std::pair<Tensor, Tensor> xy)
      : x(std::move(xy.first)), y(std::move(xy.second)) {}      // NOLINT
  ValidationData(data::Dataset ds) : dataset(std::move(ds)) {}  // NOLINT
  // One array per model input and one per model output.
  static ValidationData arrays(std::vector<Tensor> xs, std::vector<Tensor> ys,
                               Tensor sample_weight = {}) {
    ValidationData v;
    v.xs = std::move(xs), v.ys = std::move(ys), v.sample_weight = std::move(sample_weight);
    return v;
  }
  // Keras's dict structure: x keyed by input name, y (and the optional per-output sample
  // weights; an output left out weighs 1) by output name.
  static ValidationData dicts(TensorDict x, TensorDict y, TensorDict sample_weights = {}) {
    ValidationData v;
    v.x_dict = std::move(x), v.y_dict = std::move(y), v.weight_dict = std::move(sample_weights);
    return v;
  }
  Tensor x, y, sample_weight;
  std::vector<Tensor> xs, ys;              // arrays(): several inputs / outputs
  TensorDict x_dict, y_dict, weight_dict;  // dicts()
  data::Dataset dataset;
  bool defined() const {
    return x.defined() || !xs.empty() || !x_dict.tensors.empty() || dataset.valid();
  }
};

struct FitConfig {
  int batch_size = 32;
  int epochs = 1;
  int verbose = 1;  // 0 silent, 1 progress bar, 2 one line per epoch
  std::vector<CallbackPtr> callbacks;
  double validation_split = 0.0;
  ValidationData validation_data;  // (x, y), or a Dataset of batches
  bool shuffle = true;             // arrays only (a Dataset shuffles itself)
  int initial_epoch = 0;
  // 0 = the whole data each epoch (a fresh dataset iterator per epoch). > 0: this many steps
  // per epoch; a Dataset's iterator then continues across epochs (so repeat()ed, infinite
  // datasets work) and restarts only when it runs out.
  int64_t steps_per_epoch = 0;
  uint64_t seed = 0;  // shuffle seed
  // Keras's weighted training (arrays; a Dataset's elements carry weights as their third
  // component). sample_weight [N]: each sample's weight; the loss is the Keras
  // "sum_over_batch_size" reduction sum(loss * w) / batch_size, and weighted_metrics become
  // sum(value * w) / sum(w). class_weight {class: weight}: each sample weighs its label's
  // class weight (1 for classes not listed; one-hot labels by their argmax); it applies to the
  // training data only. Not both at once (as in Keras). validation_split splits sample_weight
  // like x and y.
  Tensor sample_weight;
  std::map<int, double> class_weight;
  // Keras's per-output sample weights (several outputs): one [N] array per output (the list
  // form, in the model's output order; an undefined entry weighs 1), or keyed by output name
  // (an output left out weighs 1). Output o's loss and its weighted_metrics use its weights
  // (the loss as above, sum(loss_o * w_o) / batch_size). Instead of sample_weight and
  // class_weight; validation_split splits them too.
  std::vector<Tensor> output_sample_weights;
  std::map<std::string, Tensor> sample_weight_by_output;
};

struct EvaluateConfig {
  int batch_size = 32;  // arrays only; a Dataset is already batched
  int verbose = 1;
  int64_t steps = 0;     // Dataset: 0 = until the end
  Tensor sample_weight;  // arrays: per-sample weights [N] (see FitConfig::sample_weight)
  // arrays: per-output weights (see FitConfig::output_sample_weights), instead of sample_weight.
  std::vector<Tensor> output_sample_weights;
  std::map<std::string, Tensor> sample_weight_by_output;
  // on_test_begin / on_test_batch_begin / on_test_batch_end (running metrics) / on_test_end.
  std::vector<CallbackPtr> callbacks;
};

struct PredictConfig {
  int batch_size = 32;  // arrays only; a Dataset is already batched
  int verbose = 0;
  // on_predict_begin / on_predict_batch_begin / on_predict_batch_end / on_predict_end.
  std::vector<CallbackPtr> callbacks;
};

// train_on_batch / test_on_batch's weights (Keras's arguments; not both).
struct BatchWeights {
  Tensor sample_weight;
  std::map<int, double> class_weight;  // train_on_batch only
  // Per-output weights (see FitConfig::output_sample_weights), instead of the two above.
  std::vector<Tensor> output_sample_weights;
  std::map<std::string, Tensor> sample_weight_by_output;
};

class Program;      // a compiled train/eval/predict step (src/train/program.h)
class Replication;  // per-replica variable copies under a strategy (src/train/program.h)

class Model : public Network {
 public:
  Model();
  Model(std::vector<KTensor> inputs, std::vector<KTensor> outputs, std::string name = "");
  Model(Network network);  // NOLINT: a Sequential or functional network becomes trainable
  Model(KTensor input, KTensor output, std::string name = "")
      : Model(std::vector<KTensor>{input}, std::vector<KTensor>{output}, std::move(name)) {}
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // Under a strategy (the model was created, or is compiled, inside strategy.scope()) every
  // program is built once per local replica and fit splits each global batch across them.
  void compile(CompileConfig config);
  History fit(const Tensor& x, const Tensor& y, FitConfig config = {});
  // dataset yields batched {x, y} elements (global batches under a strategy; under a
  // multi-worker strategy fit shards it across workers with distribute_dataset's AUTO policy,
  // unless it comes from distribute_dataset / distribute_datasets_from_function). The History
  // and the epoch logs carry "input_wait_seconds" (time the steps waited for the next batch)
  // and "input_wait_fraction" (of the epoch's step time).
  History fit(const data::Dataset& dataset, FitConfig config = {});
  History fit(const distribute::DistributedDataset& dataset, FitConfig config = {});
  Logs evaluate(const Tensor& x, const Tensor& y, EvaluateConfig config = {});
  Logs evaluate(const data::Dataset& dataset, EvaluateConfig config = {});
  Tensor predict(const Tensor& x, int batch_size = 32, int verbose = 0);
  Tensor predict(const data::Dataset& dataset, int verbose = 0);  // elements {x} or {x, y}
  Tensor predict(const Tensor& x, PredictConfig config);
  Tensor predict(const data::Dataset& dataset, PredictConfig config);

  // Several inputs and outputs (Keras's lists). xs holds one array per model input, ys one per
  // model output, each in the model's order (inputs() / outputs()); every array has the same
  // number of rows. A sample_weight [N] applies to every output's loss and weighted metrics
  // (class_weight needs a single output, as in Keras; per-output weights:
  // FitConfig::output_sample_weights). A Dataset for such a model yields flat elements
  // {x_1, ..., x_I, y_1, ..., y_O[, sample_weight]} or {..., y_O, w_1, ..., w_O} (inputs, then
  // targets, then the optional weights, for every output or one per output; predict takes
  // {x_1..x_I} and ignores further components). The
  // single-tensor overloads above are the I = O = 1 case; predict's single-tensor forms need a
  // single-output model.
  History fit(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, FitConfig config = {});
  Logs evaluate(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                EvaluateConfig config = {});
  // One tensor per model output.
  std::vector<Tensor> predict(const std::vector<Tensor>& xs, PredictConfig config = {});
  std::vector<Tensor> predict_outputs(const data::Dataset& dataset, PredictConfig config = {});
  // Keras's dict structure (TensorDict): x keyed by input name, y by output name; the same
  // steps and results as the list forms. predict returns the predictions keyed by output name.
  History fit(const TensorDict& x, const TensorDict& y, FitConfig config = {});
  Logs evaluate(const TensorDict& x, const TensorDict& y, EvaluateConfig config = {});
  std::map<std::string, Tensor> predict(const TensorDict& x, PredictConfig config = {});
  Logs train_on_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                      BatchWeights weights = {});
  Logs test_on_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                     BatchWeights weights = {});
  std::vector<Tensor> predict_on_batch(const std::vector<Tensor>& xs);
  // The names of the layers computing the outputs (Keras's output_names: the log prefixes of a
  // multi-output model), and each output's loss and loss weight as compile() resolved them.
  std::vector<std::string> output_names() const;
  std::vector<std::string> input_names() const;  // the Input layers' names (TensorDict keys)
  const std::vector<LossPtr>& output_losses() const { return output_losses_; }
  const std::vector<double>& loss_weights() const { return loss_weights_; }

  // Keras's *_on_batch: one step on exactly this batch (split across the local replicas; under
  // several workers every worker passes the same global batch). The metrics are reset first, so
  // the logs are this batch's: loss and metrics after train_on_batch's step (computed with the
  // weights before its update, as in fit), and test_on_batch's evaluation. No callbacks run.
  Logs train_on_batch(const Tensor& x, const Tensor& y, BatchWeights weights = {});
  Logs test_on_batch(const Tensor& x, const Tensor& y, BatchWeights weights = {});
  Tensor predict_on_batch(const Tensor& x);

  // Checkpoints (lockstep/io/checkpoint.h): weights only, or weights + optimizer state +
  // progress. Strategy-agnostic: one copy of the weights, loadable under any replica count.
  // "*.h5" (e.g. "x.weights.h5"): Keras's .weights.h5 layout (lockstep/train/saving.h).
  void save_weights(const std::string& path) const;
  void load_weights(const std::string& path);
  // keras model.save: a Keras 3 .keras file (lockstep/train/saving.h; no optimizer yet).
  void save(const std::string& path) const;
  std::string to_json() const { return get_config().dump(); }
  // The strategy this model is replicated by (nullptr: none).
  const std::shared_ptr<distribute::StrategyImpl>& strategy() const { return strategy_; }
  // Where the next fit() starts (set by BackupAndRestore in on_train_begin): epoch and step
  // within it. Cleared by fit() once used.
  void set_resume_point(int epoch, int64_t step) { resume_epoch_ = epoch, resume_step_ = step; }

  bool stop_training = false;

  const CompileConfig& compile_config() const { return config_; }
  // Seconds spent compiling programs so far, and how many were compiled.
  double compile_seconds() const { return compile_seconds_; }
  int programs_compiled() const { return int(programs_.size()); }
  // The running fit() so far (reset when fit starts): samples this process's replicas stepped
  // on and seconds in its epochs' steps (compile and validation excluded). Callbacks read it
  // (CostReport).
  struct FitProgress {
    int64_t samples = 0;
    double train_seconds = 0;
  };
  const FitProgress& fit_progress() const { return fit_progress_; }
  // The loss tracker first, then (several outputs) each output's loss tracker, then metrics,
  // weighted_metrics.
  std::vector<MetricPtr> metrics() const;
  // The log key of each of metrics() (its name, or "weighted_<name>" for a weighted metric
  // whose name a plain one already has, as Keras names them).
  std::vector<std::string> metric_log_names() const;
  struct Source;  // internal: where fit/evaluate take batches from (src/train/fit_source.h)

 private:
  void resolve_outputs();  // compile(): per-output losses, weights and metrics
  // weighted: 0 none, 1 one weight per sample, O (several outputs): one per sample and output.
  Program& program(const std::string& kind, int64_t batch, int replica = 0, int weighted = 0);
  History fit_loop(Source& source, FitConfig& cfg);  // runs a FitLoop
  History fit_dataset(const data::Dataset& dataset, FitConfig cfg, bool distributed);
  Logs evaluate_loop(Source& source, int verbose, const std::vector<CallbackPtr>& callbacks = {});
  std::vector<Tensor> predict_arrays(const std::vector<Tensor>& xs, const PredictConfig& config);
  std::vector<Tensor> predict_dataset(const data::Dataset& dataset, const PredictConfig& config);
  History fit_arrays(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, FitConfig cfg);
  Logs evaluate_arrays(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                       EvaluateConfig cfg, const char* fn);
  Logs train_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                   BatchWeights weights);
  friend class FitLoop;  // fit's epoch loop (src/train/fit_loop.h)
  friend class Program;  // reads the resolved losses and which output each metric watches
  CompileConfig config_;
  bool compiled_ = false;
  MetricPtr loss_tracker_;
  std::vector<MetricPtr> metrics_;
  std::vector<MetricPtr> weighted_metrics_;
  std::vector<std::string> metric_log_names_;
  std::vector<LossPtr> output_losses_;           // one per output
  std::vector<double> loss_weights_;             // one per output
  std::vector<MetricPtr> output_loss_trackers_;  // "<output>_loss" (several outputs only)
  std::vector<int> metric_outputs_;              // the output each of metrics_ watches
  std::vector<int> weighted_metric_outputs_;     // ... and each of weighted_metrics_
  std::map<std::tuple<std::string, int64_t, int, int>, std::unique_ptr<Program>> programs_;
  double compile_seconds_ = 0;
  std::shared_ptr<distribute::StrategyImpl> strategy_;
  std::unique_ptr<Replication> replication_;
  FitProgress fit_progress_;
  int resume_epoch_ = -1;
  int64_t resume_step_ = 0;
};

// keras.Sequential: the first item must be an Input (so shapes are known when built).
Model Sequential(std::vector<SequentialItem> items, std::string name = "sequential");

}  // namespace lockstep
