// Model::fit / evaluate / predict: the entry points (argument checks, validation split, the
// batch source) and the evaluate and predict loops. fit's epoch loop is FitLoop (fit_loop.h).
// evaluate and predict split each batch across the local replicas (one when the model is not
// replicated), copy each share into its replica's program and run the replicas together.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/train/model.h"
#include "lockstep/train/progress.h"
#include "train/fit_loop.h"
#include "train/fit_source.h"
#include "train/program.h"
#include "train/worker_agreement.h"

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

// One execution of evaluate or predict (CompileConfig::steps_per_execution = N): up to N
// batches, each split across the local replicas that get rows of it and staged in their
// programs' slots (N = 1: copied into the programs' inputs), then run back to back: one call
// into each program per run of consecutive batches on the same programs (a tail batch of
// another size is a run of its own).
class Execution {
 public:
  struct Batch {
    int64_t first_row = 0;           // this worker's rows of the source's batch:
    int64_t rows = 0;                // [first_row, first_row + rows)
    int used = 0;                    // replicas with rows
    std::vector<Program*> programs;  // [replica < used]
    std::vector<int> slots;          // [replica < used]: its program's slot (-1: the inputs)
    std::vector<int64_t> begins;     // [replica < used]: its first row, from first_row
  };
  // program(rows, replica): the step program for a replica's share of the current batch.
  Execution(int steps_per_execution, int local_replicas,
            std::function<Program&(int64_t, int)> program)
      : n_(steps_per_execution), local_replicas_(local_replicas), program_(std::move(program)) {}
  int size() const { return count_; }
  bool full() const { return count_ >= n_; }
  const Batch& batch(int i) const { return batches_[size_t(i)]; }
  void clear() { count_ = 0, slots_used_.clear(); }

  // Stages rows [first_row, first_row + rows) of the batch the source holds.
  void add(Model::Source& source, int64_t first_row, int64_t rows) {
    if (count_ == int(batches_.size())) batches_.emplace_back();
    Batch& b = batches_[size_t(count_++)];
    b.first_row = first_row, b.rows = rows;
    b.used = int(std::min<int64_t>(local_replicas_, rows));
    b.programs.assign(size_t(b.used), nullptr), b.slots.assign(size_t(b.used), -1);
    b.begins.assign(size_t(b.used), 0);
    for (int replica = 0; replica < b.used; ++replica) {
      auto [begin, end] = replica_rows(rows, b.used, replica);
      Program& p = program_(end - begin, replica);
      b.programs[size_t(replica)] = &p, b.begins[size_t(replica)] = begin;
      if (n_ == 1) {
        source.copy(first_row + begin, first_row + end, p);
        continue;
      }
      const int slot = take_slot(&p);
      p.stage(slot + 1);
      xs_.clear(), ys_.clear();
      for (int i = 0; i < p.inputs(); ++i) xs_.push_back(&p.staged_x(slot, i));
      for (int i = 0; i < p.targets(); ++i) ys_.push_back(&p.staged_y(slot, i));
      source.copy_rows(first_row + begin, first_row + end, xs_, ys_, p.staged_sample_weight(slot));
      b.slots[size_t(replica)] = slot;
    }
  }

  // Runs the staged batches (the replicas together under a strategy).
  void run(distribute::StrategyImpl* strategy) {
    for (int i = 0; i < count_;) {
      const Batch& first = batches_[size_t(i)];
      int steps = 1;
      while (n_ > 1 && i + steps < count_ && batches_[size_t(i + steps)].programs == first.programs)
        ++steps;
      auto run_replica = [&](int replica) {
        if (replica >= first.used) return;
        Program& p = *first.programs[size_t(replica)];
        p.run_steps(first.slots[size_t(replica)], steps, p.step());
      };
      if (strategy && first.used > 1) {
        strategy->run_replicas(run_replica);
      } else {
        for (int replica = 0; replica < first.used; ++replica) run_replica(replica);
      }
      i += steps;
    }
  }

  // After run(): staged batch i's predictions of output o from `replica` (predict programs).
  const Tensor& predictions(int i, int replica, int o) const {
    const Batch& b = batches_[size_t(i)];
    const Program& p = *b.programs[size_t(replica)];
    const int slot = b.slots[size_t(replica)];
    return slot < 0 ? p.predictions(o) : p.staged_prediction(slot, o);
  }

 private:
  int take_slot(Program* program) {  // the program's next free slot in this execution
    for (auto& [p, used] : slots_used_)
      if (p == program) return used++;
    slots_used_.emplace_back(program, 1);
    return 0;
  }
  const int n_, local_replicas_;
  std::function<Program&(int64_t, int)> program_;
  std::vector<Batch> batches_;  // [0, count_) staged
  int count_ = 0;
  std::vector<std::pair<Program*, int>> slots_used_;
  std::vector<Tensor*> xs_, ys_;  // scratch
};

}  // namespace

History Model::fit(const Tensor& x_in, const Tensor& y_in, FitConfig cfg) {
  return fit_arrays({x_in}, {y_in}, std::move(cfg));
}

History Model::fit(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys, FitConfig cfg) {
  return fit_arrays(xs, ys, std::move(cfg));
}

History Model::fit(const TensorDict& x, const TensorDict& y, FitConfig cfg) {
  return fit_arrays(arrays_by_name(*this, x, false, "fit", "x"),
                    arrays_by_name(*this, y, true, "fit", "y"), std::move(cfg));
}

History Model::fit_arrays(const std::vector<Tensor>& xs_in, const std::vector<Tensor>& ys_in,
                          FitConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
  LS_CHECK(cfg.batch_size >= 1, "fit: batch_size must be >= 1, got ", cfg.batch_size);
  // Before any check a worker could fail alone: the same fingerprint makes the same checks
  // pass or fail on every worker, so none is left waiting for another.
  agree_before_fit(*this, cfg, {"arrays", std::to_string(cfg.batch_size), ""});
  LS_CHECK(cfg.validation_split >= 0 && cfg.validation_split < 1,
           "fit: validation_split must be in [0, 1), got ", cfg.validation_split);
  std::vector<Tensor> ys = check_model_arrays(*this, xs_in, &ys_in, "fit");
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

namespace {
FitData dataset_fit_data(const data::Dataset& dataset, const std::string& kind) {
  const auto spec = dataset.element_spec();
  FitData data{kind, "\"unknown\"", spec ? spec->str() : "unknown"};
  if (spec && !spec->components.empty() && spec->components[0].shape.rank() >= 1 &&
      spec->components[0].shape[0] >= 0)
    data.global_batch = std::to_string(spec->components[0].shape[0]);
  return data;
}
}  // namespace

History Model::fit(const data::Dataset& dataset, FitConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
  agree_before_fit(*this, cfg, dataset_fit_data(dataset, "dataset"));
  return fit_dataset(dataset, std::move(cfg), false);
}

History Model::fit_dataset(const data::Dataset& dataset, FitConfig cfg, bool distributed) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
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

History Model::fit(const distribute::DistributedDataset& dataset, FitConfig cfg) {
  LS_CHECK(strategy_, "fit(DistributedDataset): model '", name_,
           "' is not replicated (create or compile it inside strategy.scope())");
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before fit()");
  agree_before_fit(*this, cfg, dataset_fit_data(dataset.dataset(), "distributed_dataset"));
  return fit_dataset(dataset.dataset(), std::move(cfg), true);
}

History Model::fit_loop(Source& source, FitConfig& cfg) {
  return FitLoop(*this, source, cfg).run();
}

// Batches in executions of steps_per_execution; the batch callbacks see each execution once, as
// Keras 3: on_test_batch_begin(its first batch), on_test_batch_end(its last batch, the running
// metrics after it).
Logs Model::evaluate_loop(Source& source, int verbose, const std::vector<CallbackPtr>& callbacks) {
  const int local_replicas = replication_ ? replication_->local_replicas() : 1;
  distribute::StrategyImpl* strategy = replication_ ? &replication_->strategy() : nullptr;
  if (strategy && !strategy->is_chief()) verbose = 0;
  if (replication_) replication_->sync_from_primary();
  reset_metrics(*this, replication_.get());
  for (auto& cb : callbacks) cb->set_model(this), cb->on_test_begin({});
  source.begin_epoch(0);
  ProgressBar bar(int(std::max<int64_t>(source.steps(), 0)), verbose);
  int batch_index = 0;
  Execution execution(config_.steps_per_execution, local_replicas,
                      [&](int64_t rows, int replica) -> Program& {
                        return program("eval", rows, replica, source.weighted());
                      });
  // Several workers with arrays: each evaluates its rows of every batch (no step needs the
  // others; the metrics are summed over workers at the end).
  const bool split_rows =
      strategy && strategy->num_workers > 1 && dynamic_cast<TensorSource*>(&source) != nullptr;
  for (;;) {
    execution.clear();
    while (!execution.full() && source.next()) {
      int64_t first_row = 0, rows = source.size();  // this worker's rows of the batch
      if (split_rows) {
        auto [begin, end] = replica_rows(rows, strategy->num_workers, strategy->worker_index);
        first_row = begin, rows = end - begin;
      }
      if (rows == 0) continue;
      if (execution.size() == 0)
        for (auto& cb : callbacks) cb->on_test_batch_begin(batch_index, {});
      execution.add(source, first_row, rows);
    }
    if (execution.size() == 0) break;
    execution.run(strategy);
    batch_index += execution.size();
    if (!callbacks.empty()) {  // this worker's running metrics (no round trip per execution)
      const Logs running = read_metrics(*this, replication_.get(), "", false);
      for (auto& cb : callbacks) cb->on_test_batch_end(batch_index - 1, running);
    }
  }
  Logs logs = read_metrics(*this, replication_.get());
  if (verbose) bar.finish(logs);
  for (auto& cb : callbacks) cb->on_test_end(logs);
  return logs;
}

Logs Model::evaluate(const Tensor& x, const Tensor& y_in, EvaluateConfig cfg) {
  return evaluate_arrays({x}, {y_in}, std::move(cfg), "evaluate");
}

Logs Model::evaluate(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                     EvaluateConfig cfg) {
  return evaluate_arrays(xs, ys, std::move(cfg), "evaluate");
}

Logs Model::evaluate(const TensorDict& x, const TensorDict& y, EvaluateConfig cfg) {
  return evaluate_arrays(arrays_by_name(*this, x, false, "evaluate", "x"),
                         arrays_by_name(*this, y, true, "evaluate", "y"), std::move(cfg),
                         "evaluate");
}

Logs Model::evaluate_arrays(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys_in,
                            EvaluateConfig cfg, const char* fn) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before ", fn, "()");
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

Logs Model::evaluate(const data::Dataset& dataset, EvaluateConfig cfg) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before evaluate()");
  LS_CHECK(!cfg.sample_weight.defined(),
           "evaluate(Dataset): sample_weight is not supported with a Dataset (yield {x, y, "
           "sample_weight} elements instead)");
  data::Dataset ds = cfg.steps > 0 ? dataset.take(cfg.steps) : dataset;
  if (strategy_ && strategy_->num_workers > 1) {
    // Each worker evaluates its share (by file when the pipeline reads files, else by
    // element), in batches of about global / workers; the metrics are summed over workers.
    const int workers = strategy_->num_workers;
    const data::ElementSpec spec = ds.probe_element_spec();
    LS_CHECK(!spec.components.empty() && spec.components[0].shape.rank() >= 1,
             "evaluate(Dataset): elements must be batched, got ", spec.str());
    const int64_t per_worker = std::max<int64_t>(1, spec.components[0].shape[0] / workers);
    ds = distribute::shard_for_worker(ds, workers, strategy_->worker_index, per_worker,
                                      distribute::AutoShardPolicy::AUTO);
  }
  DatasetSource source(*this, ds, true, false, "evaluate(Dataset)");
  return evaluate_loop(source, cfg.verbose, cfg.callbacks);
}

namespace {

// predict's single-tensor forms return the one output.
void check_single_output(const Model& m, const char* fn) {
  LS_CHECK(m.outputs().size() == 1, fn, ": model '", m.name(), "' has ", m.outputs().size(),
           " outputs; use the std::vector overloads (predict({x...}), predict_outputs(dataset), "
           "predict_on_batch({x...})), which return one tensor per output");
}

}  // namespace

Tensor Model::predict(const Tensor& x, int batch_size, int verbose) {
  return predict(x, {.batch_size = batch_size, .verbose = verbose});
}
Tensor Model::predict(const Tensor& x, PredictConfig config) {
  check_single_output(*this, "predict");
  return predict_arrays({x}, config)[0];
}
Tensor Model::predict(const data::Dataset& dataset, int verbose) {
  return predict(dataset, {.verbose = verbose});
}
Tensor Model::predict(const data::Dataset& dataset, PredictConfig config) {
  check_single_output(*this, "predict(Dataset)");
  return predict_dataset(dataset, config)[0];
}
std::vector<Tensor> Model::predict(const std::vector<Tensor>& xs, PredictConfig config) {
  return predict_arrays(xs, config);
}
std::vector<Tensor> Model::predict_outputs(const data::Dataset& dataset, PredictConfig config) {
  return predict_dataset(dataset, config);
}
std::map<std::string, Tensor> Model::predict(const TensorDict& x, PredictConfig config) {
  std::vector<Tensor> outs =
      predict_arrays(arrays_by_name(*this, x, false, "predict", "x"), config);
  const std::vector<std::string> names = output_names();
  std::map<std::string, Tensor> keyed;
  for (size_t o = 0; o < outs.size(); ++o) keyed[names[o]] = std::move(outs[o]);
  return keyed;
}

namespace {

// predict's loop: the source's batches in executions of steps_per_execution (the batch
// callbacks see each execution once, as Keras 3: on_predict_batch_begin(its first batch),
// on_predict_batch_end(its last batch)); hands each batch's predictions to take(first row of
// the part in all the data, output, predictions), in row order.
void predict_executions(Execution& execution, Model::Source& source,
                        distribute::StrategyImpl* strategy,
                        const std::vector<CallbackPtr>& callbacks,
                        const std::function<void(int64_t, int, const Tensor&)>& take) {
  source.begin_epoch(0);
  std::vector<int64_t> first_rows;  // of each staged batch, in all the data
  int64_t rows = 0;
  int batch_index = 0;
  for (;;) {
    execution.clear(), first_rows.clear();
    while (!execution.full() && source.next()) {
      if (execution.size() == 0)
        for (auto& cb : callbacks) cb->on_predict_batch_begin(batch_index, {});
      execution.add(source, 0, source.size());
      first_rows.push_back(rows);
      rows += source.size();
    }
    if (execution.size() == 0) break;
    execution.run(strategy);
    for (int i = 0; i < execution.size(); ++i) {
      const Execution::Batch& b = execution.batch(i);
      for (int replica = 0; replica < b.used; ++replica)
        for (int o = 0; o < b.programs[size_t(replica)]->outputs(); ++o)
          take(first_rows[size_t(i)] + b.begins[size_t(replica)], o,
               execution.predictions(i, replica, o));
    }
    batch_index += execution.size();
    for (auto& cb : callbacks) cb->on_predict_batch_end(batch_index - 1, {});
  }
}

}  // namespace

std::vector<Tensor> Model::predict_arrays(const std::vector<Tensor>& xs,
                                          const PredictConfig& config) {
  const int batch_size = config.batch_size;
  check_model_arrays(*this, xs, nullptr, "predict");
  LS_CHECK(batch_size >= 1, "predict: batch_size must be >= 1, got ", batch_size);
  for (auto& cb : config.callbacks) cb->set_model(this), cb->on_predict_begin({});
  if (replication_) replication_->sync_from_primary();
  const int64_t n = xs[0].dim(0);
  TensorSource source(xs, {}, batch_size, false, 0, 0);
  std::vector<Tensor> out(outputs_.size());
  Execution execution(
      compiled_ ? config_.steps_per_execution : 1,
      replication_ ? replication_->local_replicas() : 1,
      [&](int64_t rows, int replica) -> Program& { return program("predict", rows, replica); });
  predict_executions(execution, source, replication_ ? &replication_->strategy() : nullptr,
                     config.callbacks, [&](int64_t row, int o, const Tensor& pr) {
                       Tensor& dst = out[size_t(o)];
                       if (!dst.defined())
                         dst = Tensor::empty(pr.shape().with_dim(0, n), pr.dtype());
                       const size_t row_bytes = pr.nbytes() / size_t(pr.dim(0));
                       std::memcpy(static_cast<char*>(dst.raw()) + size_t(row) * row_bytes,
                                   pr.raw(), pr.nbytes());
                     });
  for (auto& cb : config.callbacks) cb->on_predict_end({});
  return out;
}

std::vector<Tensor> Model::predict_dataset(const data::Dataset& dataset,
                                           const PredictConfig& config) {
  for (auto& cb : config.callbacks) cb->set_model(this), cb->on_predict_begin({});
  if (replication_) replication_->sync_from_primary();
  DatasetSource source(*this, dataset, false, false, "predict(Dataset)");
  // Per output, in row order: replicas hand their parts in order.
  std::vector<std::vector<Tensor>> parts(outputs_.size());
  int64_t total = 0;
  Execution execution(
      compiled_ ? config_.steps_per_execution : 1,
      replication_ ? replication_->local_replicas() : 1,
      [&](int64_t rows, int replica) -> Program& { return program("predict", rows, replica); });
  predict_executions(execution, source, replication_ ? &replication_->strategy() : nullptr,
                     config.callbacks, [&](int64_t, int o, const Tensor& pr) {
                       parts[size_t(o)].push_back(pr.clone());
                       if (o == 0) total += pr.dim(0);
                     });
  LS_CHECK(!parts[0].empty(), "predict(Dataset): the dataset yielded no batches");
  std::vector<Tensor> outs;
  for (auto& list : parts) {
    Tensor out = Tensor::empty(list[0].shape().with_dim(0, total), list[0].dtype());
    size_t off = 0;
    for (auto& t : list) {
      std::memcpy(static_cast<char*>(out.raw()) + off, t.raw(), t.nbytes());
      off += t.nbytes();
    }
    outs.push_back(std::move(out));
  }
  for (auto& cb : config.callbacks) cb->on_predict_end({});
  return outs;
}

// ---- *_on_batch ----------------------------------------------------------------------------

Logs Model::train_on_batch(const Tensor& x, const Tensor& y_in, BatchWeights weights) {
  return train_batch({x}, {y_in}, std::move(weights));
}

Logs Model::train_on_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                           BatchWeights weights) {
  return train_batch(xs, ys, std::move(weights));
}

Logs Model::train_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys_in,
                        BatchWeights weights) {
  LS_CHECK(compiled_, "Model '", name_, "': call compile() before train_on_batch()");
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

Logs Model::test_on_batch(const Tensor& x, const Tensor& y, BatchWeights weights) {
  LS_CHECK(weights.class_weight.empty(), "test_on_batch: class_weight applies to training only");
  return evaluate(x, y,
                  {.batch_size = int(x.dim(0)),
                   .verbose = 0,
                   .sample_weight = weights.sample_weight,
                   .output_sample_weights = weights.output_sample_weights,
                   .sample_weight_by_output = weights.sample_weight_by_output});
}

Logs Model::test_on_batch(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys,
                          BatchWeights weights) {
  LS_CHECK(weights.class_weight.empty(), "test_on_batch: class_weight applies to training only");
  LS_CHECK(!xs.empty() && xs[0].defined() && xs[0].rank() >= 1, "test_on_batch: xs is empty");
  return evaluate_arrays(xs, ys,
                         {.batch_size = int(xs[0].dim(0)),
                          .verbose = 0,
                          .sample_weight = weights.sample_weight,
                          .output_sample_weights = weights.output_sample_weights,
                          .sample_weight_by_output = weights.sample_weight_by_output},
                         "test_on_batch");
}

Tensor Model::predict_on_batch(const Tensor& x) {
  LS_CHECK(x.defined() && x.rank() >= 1 && x.dim(0) >= 1, "predict_on_batch: x is empty");
  return predict(x, int(x.dim(0)), 0);
}

std::vector<Tensor> Model::predict_on_batch(const std::vector<Tensor>& xs) {
  LS_CHECK(!xs.empty() && xs[0].defined() && xs[0].rank() >= 1 && xs[0].dim(0) >= 1,
           "predict_on_batch: xs is empty");
  return predict(xs, {.batch_size = int(xs[0].dim(0))});
}

}  // namespace lockstep
