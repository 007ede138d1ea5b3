// Model::fit / evaluate / predict / *_on_batch: one entry point each for every form of the data
// (ModelData: arrays, a list, a dict, a Dataset, a DistributedDataset), the argument checks, the
// validation split and the batch source. fit's epoch loop is FitLoop (fit_loop.h); the evaluate
// and predict loops are in evaluate_predict.cpp.
#include <algorithm>
#include <cmath>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/nn/text_layers.h"
#include "lockstep/trainers/model.h"
#include "lockstep/trainers/progress.h"
#include "trainers/fit_loop.h"
#include "trainers/fit_source.h"
#include "trainers/model_runtime.h"
#include "trainers/program.h"
#include "trainers/thread_replicas.h"
#include "trainers/worker_agreement.h"

namespace lockstep {

Tensor training_weights(const Tensor& x, const Tensor& y, const Tensor& sample_weight,
                        const std::map<int, double>& class_weight, const char* fn) {
  LS_CHECK(!sample_weight.defined() || class_weight.empty(), fn,
           ": You cannot `class_weight` and `sample_weight` at the same time (pass one)");
  if (sample_weight.defined()) return check_sample_weight(sample_weight, x.dim(0), fn);
  if (!class_weight.empty()) return class_weight_to_sample_weights(y, class_weight);
  return {};
}

namespace {

// The one weight array of a call: `weights` (from sample_weight / class_weight) or the per-output
// sample weights, never both.
Tensor with_output_weights(const Model& m, Tensor weights, const std::vector<Tensor>& list,
                           const std::map<std::string, Tensor>& dict, int64_t n, const char* fn) {
  Tensor per_output = output_sample_weights(m, list, dict, n, fn);
  if (!per_output.defined()) return weights;
  LS_CHECK(!weights.defined(), fn,
           ": pass sample_weight or class_weight, or per-output sample weights "
           "(output_sample_weights / sample_weight_by_output), not both");
  return per_output;
}

// Checked validation arrays as fit evaluates them: (x, y[, w]) for a single-input,
// single-output model, else a Dataset of batch_size batches {x_1..x_I, y_1..y_O[, w]}.
ValidationData validation_arrays(std::vector<Tensor> xs, std::vector<Tensor> ys, Tensor weights,
                                 int batch_size) {
  if (xs.size() == 1 && ys.size() == 1)
    return ValidationData(std::move(xs[0]), std::move(ys[0]), std::move(weights));
  std::vector<data::Component> parts;
  for (auto& t : xs) parts.emplace_back(t.contiguous());
  for (auto& t : ys) parts.emplace_back(t.contiguous());
  if (weights.defined()) parts.emplace_back(weights);
  return ValidationData(data::Dataset::from_tensor_slices(std::move(parts)).batch(batch_size));
}

// fit's validation_data given as arrays (x, y or xs, ys): checked, and (several inputs or
// outputs) made a Dataset.
void check_validation_arrays(const Model& model, FitConfig& cfg) {
  ValidationData& v = cfg.validation_data;
  if (!v.x_dict.tensors.empty()) {  // dicts(): as arrays (per-output weights: [N, outputs])
    LS_CHECK(!v.x.defined() && v.xs.empty(),
             "fit(validation_data): pass x, y, xs, ys or dicts, one form");
    std::vector<Tensor> xs = arrays_by_name(model, v.x_dict, false, "fit(validation_data)", "x");
    std::vector<Tensor> ys = arrays_by_name(model, v.y_dict, true, "fit(validation_data)", "y");
    ys = check_model_arrays(model, xs, &ys, "fit(validation_data)");
    Tensor w = output_sample_weights(model, {}, v.weight_dict.tensors, xs[0].dim(0),
                                     "fit(validation_data)");
    v = validation_arrays(std::move(xs), std::move(ys), std::move(w), cfg.batch_size);
    return;
  }
  if (!v.x.defined() && v.xs.empty()) return;
  LS_CHECK(!v.x.defined() || v.xs.empty(),
           "fit(validation_data): pass x, y or xs, ys (ValidationData::arrays), not both");
  std::vector<Tensor> xs = v.x.defined() ? std::vector<Tensor>{v.x} : v.xs;
  std::vector<Tensor> ys_in = v.x.defined() ? std::vector<Tensor>{v.y} : v.ys;
  std::vector<Tensor> ys = check_model_arrays(model, xs, &ys_in, "fit(validation_data)");
  Tensor w = v.sample_weight.defined()
                 ? check_sample_weight(v.sample_weight, xs[0].dim(0), "fit(validation_data)",
                                       "sample_weight")
                 : Tensor();
  v = validation_arrays(std::move(xs), std::move(ys), std::move(w), cfg.batch_size);
}

void check_class_weight_outputs(const Model& model, const std::map<int, double>& class_weight,
                                const char* fn) {
  LS_CHECK(class_weight.empty() || model.outputs().size() == 1, fn,
           ": class_weight is only supported for models with a single output (model '",
           model.name(), "' has ", model.outputs().size(), "); pass sample_weight instead");
}

// x or y as arrays in the model's input (output) order: the one array, the list, or the dict's
// arrays by name. fn and what ("x", "y") name the call and the argument in errors.
std::vector<Tensor> model_arrays(const Model& m, const ModelData& data, bool outputs,
                                 const char* fn, const char* what) {
  switch (data.kind()) {
    case ModelData::Kind::array:
    case ModelData::Kind::list:
      return data.arrays();
    case ModelData::Kind::dict:
      return arrays_by_name(m, data.dict(), outputs, fn, what);
    case ModelData::Kind::none:
      LS_FAIL(fn, ": ", what, " is missing (",
              outputs ? "arrays need their targets; a Dataset passed as x carries them"
                      : "pass the model's inputs",
              ")");
    default:
      LS_FAIL(fn, ": ", what, " is ", data.describe(),
              outputs ? "; a Dataset goes in x (its elements carry the targets)"
                      : "; this call takes arrays (one batch)");
  }
}

// x as a Dataset takes no y: its elements carry the targets (Keras's "`y` argument is not
// supported when using dataset as input").
void check_no_targets(const ModelData& y, const char* fn) {
  LS_CHECK(y.empty(), fn,
           ": x is a Dataset, whose elements carry the targets; y must be empty, got ",
           y.describe());
}

// predict's single-tensor x returns the one output.
void check_single_output(const Model& m, const char* fn) {
  LS_CHECK(m.outputs().size() == 1, fn, ": model '", m.name(), "' has ", m.outputs().size(),
           " outputs; pass x as a list ({x}) or a dict for one prediction per output");
}

FitData dataset_fit_data(const data::Dataset& dataset, const std::string& kind) {
  const auto spec = dataset.element_spec();
  FitData data{kind, "\"unknown\"", spec ? spec->str() : "unknown"};
  if (spec && !spec->components.empty() && spec->components[0].shape.rank() >= 1 &&
      spec->components[0].shape[0] >= 0)
    data.global_batch = std::to_string(spec->components[0].shape[0]);
  return data;
}

}  // namespace

// ---- the entry points ----------------------------------------------------------------------

// A model whose inputs take strings (Network::host_preprocessing: a Keras model with
// Input(dtype="string") -> TextVectorization -> ...): its host layers run on each batch of a
// Dataset first, in the input pipeline, as Keras runs them in tf.data.
static ModelData on_host(const Network& m, ModelData x) {
  if (!m.host_preprocessing() || x.kind() != ModelData::Kind::dataset) return x;
  return ModelData(m.host_preprocessing()->map(x.dataset()));
}

History Model::fit(ModelData x, ModelData y, FitConfig cfg) {
  x = on_host(*this, std::move(x));
  if (!x.is_dataset()) {
    std::vector<Tensor> xs = model_arrays(*this, x, false, "fit", "x");  // (x's errors first)
    return fit_arrays(xs, model_arrays(*this, y, true, "fit", "y"), std::move(cfg));
  }
  const bool distributed = x.kind() == ModelData::Kind::distributed_dataset;
  const char* fn = distributed ? "fit(DistributedDataset)" : "fit(Dataset)";
  LS_CHECK(!distributed || strategy_, fn, ": model '", name_,
           "' is not replicated (create or compile it inside strategy.scope())");
  LS_CHECK(runtime_->compiled(), "Model '", name_, "': call compile() before fit()");
  check_no_targets(y, fn);
  agree_before_fit(*this, cfg,
                   dataset_fit_data(x.dataset(), distributed ? "distributed_dataset" : "dataset"));
  return fit_dataset(x.dataset(), std::move(cfg), distributed);
}

Logs Model::evaluate(ModelData x, ModelData y, EvaluateConfig cfg) {
  x = on_host(*this, std::move(x));
  if (!x.is_dataset()) {
    std::vector<Tensor> xs = model_arrays(*this, x, false, "evaluate", "x");
    return evaluate_arrays(xs, model_arrays(*this, y, true, "evaluate", "y"), std::move(cfg),
                           "evaluate");
  }
  LS_CHECK(x.kind() == ModelData::Kind::dataset,
           "evaluate: x is a DistributedDataset; pass its Dataset (evaluate splits a Dataset "
           "across the workers itself)");
  check_no_targets(y, "evaluate(Dataset)");
  return evaluate_dataset(x.dataset(), cfg);
}

Prediction Model::predict(ModelData x, PredictConfig config) {
  x = on_host(*this, std::move(x));
  std::vector<Tensor> outputs;
  if (x.is_dataset()) {
    LS_CHECK(x.kind() == ModelData::Kind::dataset,
             "predict: x is a DistributedDataset; pass its Dataset");
    outputs = predict_dataset(x.dataset(), config);
  } else {
    if (x.kind() == ModelData::Kind::array) check_single_output(*this, "predict");
    outputs = predict_arrays(model_arrays(*this, x, false, "predict", "x"), config);
  }
  return Prediction(std::move(outputs), output_names());
}

Logs Model::train_on_batch(ModelData x, ModelData y, BatchWeights weights) {
  std::vector<Tensor> xs = model_arrays(*this, x, false, "train_on_batch", "x");
  return train_batch(xs, model_arrays(*this, y, true, "train_on_batch", "y"), std::move(weights));
}

Logs Model::test_on_batch(ModelData x, ModelData y, BatchWeights weights) {
  LS_CHECK(weights.class_weight.empty(), "test_on_batch: class_weight applies to training only");
  const std::vector<Tensor> xs = model_arrays(*this, x, false, "test_on_batch", "x");
  LS_CHECK(!xs.empty() && xs[0].defined() && xs[0].rank() >= 1, "test_on_batch: x is empty");
  return evaluate_arrays(xs, model_arrays(*this, y, true, "test_on_batch", "y"),
                         {.batch_size = int(xs[0].dim(0)),
                          .verbose = 0,
                          .sample_weight = weights.sample_weight,
                          .output_sample_weights = weights.output_sample_weights,
                          .sample_weight_by_output = weights.sample_weight_by_output},
                         "test_on_batch");
}

Prediction Model::predict_on_batch(ModelData x) {
  const std::vector<Tensor> xs = model_arrays(*this, x, false, "predict_on_batch", "x");
  LS_CHECK(!xs.empty() && xs[0].defined() && xs[0].rank() >= 1 && xs[0].dim(0) >= 1,
           "predict_on_batch: x is empty");
  return predict(std::move(x), {.batch_size = int(xs[0].dim(0))});
}

// ---- fit ------------------------------------------------------------------------------------

History Model::fit_arrays(const std::vector<Tensor>& xs_in, const std::vector<Tensor>& ys_in,
                          FitConfig cfg) {
  LS_CHECK(runtime_->compiled(), "Model '", name_, "': call compile() before fit()");
  LS_CHECK(cfg.batch_size >= 1, "fit: batch_size must be >= 1, got ", cfg.batch_size);
  // Before any check a worker could fail alone: the same fingerprint makes the same checks
  // pass or fail on every worker, so none is left waiting for another.
  const bool have_rows = !xs_in.empty() && xs_in[0].defined() && xs_in[0].rank() >= 1;
  agree_before_fit(*this, cfg,
                   {"arrays", std::to_string(cfg.batch_size), "",
                    have_rows ? std::to_string(xs_in[0].dim(0)) : std::string()});
  LS_CHECK(cfg.validation_split >= 0 && cfg.validation_split < 1,
           "fit: validation_split must be in [0, 1), got ", cfg.validation_split);
  std::vector<Tensor> ys = check_model_arrays(*this, xs_in, &ys_in, "fit");
  // Keras refuses this too: no step would run, and the History would report loss 0.
  LS_CHECK(xs_in[0].dim(0) > 0, "fit: x has 0 samples (shape ", xs_in[0].shape().str(),
           "): there is nothing to train on; pass at least one sample (check how the arrays "
           "were loaded, sliced or filtered)");
  check_class_weight_outputs(*this, cfg.class_weight, "fit");
  std::vector<Tensor> xs = xs_in;
  Tensor weights = with_output_weights(
      *this, training_weights(xs_in[0], ys_in[0], cfg.sample_weight, cfg.class_weight, "fit"),
      cfg.output_sample_weights, cfg.sample_weight_by_output, xs[0].dim(0), "fit");
  if (cfg.validation_split > 0) {  // Keras: the last fraction, before shuffling
    int64_t n = xs[0].dim(0), nv = int64_t(std::floor(double(n) * cfg.validation_split));
    LS_CHECK(nv > 0 && nv < n, "fit: validation_split ", cfg.validation_split, " leaves no data");
    // Keras splits sample_weight with x and y (class weights only weigh the training part).
    const bool split_weights = weights.defined() && cfg.class_weight.empty();
    std::vector<Tensor> vx, vy;
    for (auto& t : xs) vx.push_back(t.slice(n - nv, n).contiguous()), t = t.slice(0, n - nv);
    for (auto& t : ys) vy.push_back(t.slice(n - nv, n).contiguous()), t = t.slice(0, n - nv);
    cfg.validation_data = validation_arrays(
        std::move(vx), std::move(vy),
        split_weights ? weights.slice(n - nv, n).contiguous() : Tensor(), cfg.batch_size);
    if (weights.defined()) weights = weights.slice(0, n - nv).contiguous();
  } else {
    check_validation_arrays(*this, cfg);
  }
  if (strategy_) {
    const int replicas = strategy_->replicas_in_sync();
    LS_CHECK(cfg.batch_size % replicas == 0, "fit: batch_size ", cfg.batch_size,
             " is the global batch and must be divisible by the ", replicas,
             " replicas in sync of ", strategy_->name, " (use e.g. ",
             (cfg.batch_size / replicas + 1) * replicas, ")");
  }
  TensorSource source(xs, ys, cfg.batch_size, cfg.shuffle, cfg.seed, cfg.initial_epoch, weights);
  return fit_loop(source, cfg);
}

History Model::fit_dataset(const data::Dataset& dataset, FitConfig cfg, bool distributed) {
  LS_CHECK(runtime_->compiled(), "Model '", name_, "': call compile() before fit()");
  if (!distributed && strategy_ && strategy_->num_workers > 1) {
    // As Keras: fit() under a multi-worker strategy distributes a plain dataset itself
    // (AutoShardPolicy::AUTO: by file when it reads files, else by element), so the workers
    // split each epoch instead of all training on every batch.
    return fit_dataset(distribute::Strategy(strategy_).distribute_dataset(dataset).dataset(),
                       std::move(cfg), true);
  }
  LS_CHECK(cfg.validation_split == 0,
           "fit(Dataset): validation_split is not supported with a "
           "Dataset (pass validation_data, or split the dataset with take/skip)");
  LS_CHECK(!cfg.sample_weight.defined(),
           "fit(Dataset): sample_weight is not supported with a Dataset (yield {x, y, "
           "sample_weight} elements instead)");
  check_class_weight_outputs(*this, cfg.class_weight, "fit(Dataset)");
  check_validation_arrays(*this, cfg);
  DatasetSource source(*this, dataset, true, cfg.steps_per_epoch > 0, "fit(Dataset)",
                       cfg.class_weight);
  return fit_loop(source, cfg);
}

History Model::fit_loop(Source& source, FitConfig& cfg) {
  const bool arrays = dynamic_cast<TensorSource*>(&source) != nullptr;
  runtime_->set_thread_replicas(fit_thread_replicas(*this, runtime_->resolved(),
                                                    runtime_->replication() != nullptr,
                                                    arrays ? int64_t(cfg.batch_size) : -1));
  try {
    return FitLoop(*this, *runtime_, source, cfg).run();
  } catch (...) {
    // A replica that failed aborted the replicas' exchange and communicators for good: the next
    // fit makes fresh ones (replica 0's variables are the model's, so nothing is lost).
    runtime_->set_thread_replicas(1);
    throw;
  }
}

// ---- evaluate and train_on_batch's arrays ----------------------------------------------------

Logs Model::evaluate_arrays(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys_in,
                            EvaluateConfig cfg, const char* fn) {
  LS_CHECK(runtime_->compiled(), "Model '", name_, "': call compile() before ", fn, "()");
  LS_CHECK(cfg.batch_size >= 1, fn, ": batch_size must be >= 1, got ", cfg.batch_size);
  std::vector<Tensor> ys = check_model_arrays(*this, xs, &ys_in, fn);
  Tensor weights = with_output_weights(
      *this,
      cfg.sample_weight.defined() ? check_sample_weight(cfg.sample_weight, xs[0].dim(0), fn)
                                  : Tensor(),
      cfg.output_sample_weights, cfg.sample_weight_by_output, xs[0].dim(0), fn);
  TensorSource source(xs, ys, cfg.batch_size, false, 0, 0, weights);
  return evaluate_loop(source, cfg.verbose, cfg.callbacks);
}

Logs Model::train_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys_in,
                        BatchWeights weights) {
  LS_CHECK(runtime_->compiled(), "Model '", name_, "': call compile() before train_on_batch()");
  std::vector<Tensor> ys = check_model_arrays(*this, xs, &ys_in, "train_on_batch");
  check_class_weight_outputs(*this, weights.class_weight, "train_on_batch");
  Tensor w = with_output_weights(*this,
                                 training_weights(xs[0], ys_in[0], weights.sample_weight,
                                                  weights.class_weight, "train_on_batch"),
                                 weights.output_sample_weights, weights.sample_weight_by_output,
                                 xs[0].dim(0), "train_on_batch");
  // One epoch of one batch: the fit loop's replica split, gradient all-reduce and metric
  // reduction, with no callbacks and no validation.
  const int64_t rows = xs[0].dim(0);
  FitConfig cfg{.batch_size = int(rows), .epochs = 1, .verbose = 0, .shuffle = false};
  TensorSource source(xs, ys, rows, false, 0, 0, w);
  History history = fit_loop(source, cfg);
  Logs logs;
  for (auto& [name, values] : history.history)
    if (!values.empty() && name.rfind("input_wait_", 0) != 0) logs[name] = values.back();
  return logs;
}

}  // namespace lockstep
