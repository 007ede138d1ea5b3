// Model's evaluate and predict loops: the source's batches in executions of
// steps_per_execution (execution.h), split across the local replicas (one when the model is not
// replicated), each share copied into its replica's program, the replicas run together.
#include <algorithm>
#include <cstring>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/strategy.h"
#include "lockstep/trainers/progress.h"
#include "trainers/execution.h"
#include "trainers/model_runtime.h"

namespace lockstep {

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

// The local replicas the model's steps run on, and their strategy (nullptr: none).
int local_replicas_of(const ModelRuntime& runtime) {
  return runtime.replication() ? runtime.replication()->local_replicas() : 1;
}
distribute::StrategyImpl* strategy_of(const ModelRuntime& runtime) {
  return runtime.replication() ? &runtime.replication()->strategy() : nullptr;
}

// An execution of the model's predict programs.
Execution predict_execution(ModelRuntime& runtime, const Network& network) {
  return Execution(runtime.resolved().config.steps_per_execution, local_replicas_of(runtime),
                   [&runtime, &network](int64_t rows, int replica) -> Program& {
                     return runtime.program(network, ModelRuntime::ProgramKind::predict, rows,
                                            replica);
                   });
}

// An output's predictions for no rows: its shape with 0 rows (and 0 for any other unknown
// axis), in its dtype.
Tensor empty_output(const KTensor& output) {
  Shape shape = output.shape();
  for (int i = 0; i < shape.rank(); ++i)
    if (i == 0 || shape[i] < 0) shape = shape.with_dim(i, 0);
  return Tensor::empty(shape, output.dtype());
}

}  // namespace

// Batches in executions of steps_per_execution; the batch callbacks see each execution once, as
// Keras 3: on_test_batch_begin(its first batch), on_test_batch_end(its last batch, the running
// metrics after it).
Logs Model::evaluate_loop(Source& source, int verbose, const std::vector<CallbackPtr>& callbacks) {
  const int local_replicas = local_replicas_of(*runtime_);
  distribute::StrategyImpl* strategy = strategy_of(*runtime_);
  if (strategy && !strategy->is_chief()) verbose = 0;
  if (Replication* r = runtime_->replication())
    runtime_->residence()->to_host(), r->sync_from_primary();
  reset_metrics(*this, runtime_->replication());
  for (auto& cb : callbacks) cb->set_model(this), cb->on_test_begin({});
  source.begin_epoch(0);
  ProgressBar bar(int(std::max<int64_t>(source.steps(), 0)), verbose);
  int batch_index = 0;
  Execution execution(runtime_->resolved().config.steps_per_execution, local_replicas,
                      [&](int64_t rows, int replica) -> Program& {
                        return runtime_->program(*this, ModelRuntime::ProgramKind::eval, rows,
                                                 replica, source.weighted());
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
      const Logs running = read_metrics(*this, runtime_->replication(), "", false);
      for (auto& cb : callbacks) cb->on_test_batch_end(batch_index - 1, running);
    }
  }
  Logs logs = read_metrics(*this, runtime_->replication());
  if (verbose) bar.finish(logs);
  for (auto& cb : callbacks) cb->on_test_end(logs);
  return logs;
}

Logs Model::evaluate_dataset(const data::Dataset& dataset, const EvaluateConfig& cfg) {
  LS_CHECK(runtime_->compiled(), "Model '", name_, "': call compile() before evaluate()");
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

std::vector<Tensor> Model::predict_arrays(const std::vector<Tensor>& xs,
                                          const PredictConfig& config) {
  const int batch_size = config.batch_size;
  check_model_arrays(*this, xs, nullptr, "predict");
  LS_CHECK(batch_size >= 1, "predict: batch_size must be >= 1, got ", batch_size);
  for (auto& cb : config.callbacks) cb->set_model(this), cb->on_predict_begin({});
  if (Replication* r = runtime_->replication())
    runtime_->residence()->to_host(), r->sync_from_primary();
  const int64_t n = xs[0].dim(0);
  TensorSource source(xs, {}, batch_size, false, 0, 0);
  std::vector<Tensor> out(outputs_.size());
  Execution execution = predict_execution(*runtime_, *this);
  predict_executions(execution, source, strategy_of(*runtime_), config.callbacks,
                     [&](int64_t row, int o, const Tensor& pr) {
                       Tensor& dst = out[size_t(o)];
                       if (!dst.defined())
                         dst = Tensor::empty(pr.shape().with_dim(0, n), pr.dtype());
                       const size_t row_bytes = pr.nbytes() / size_t(pr.dim(0));
                       std::memcpy(static_cast<char*>(dst.raw()) + size_t(row) * row_bytes,
                                   pr.raw(), pr.nbytes());
                     });
  // No rows: no batch ran; each output is empty, (0, ...) as Keras returns (not shape ()).
  for (size_t o = 0; o < out.size(); ++o)
    if (!out[o].defined()) out[o] = empty_output(outputs_[o]);
  for (auto& cb : config.callbacks) cb->on_predict_end({});
  return out;
}

std::vector<Tensor> Model::predict_dataset(const data::Dataset& dataset,
                                           const PredictConfig& config) {
  for (auto& cb : config.callbacks) cb->set_model(this), cb->on_predict_begin({});
  if (Replication* r = runtime_->replication())
    runtime_->residence()->to_host(), r->sync_from_primary();
  DatasetSource source(*this, dataset, false, false, "predict(Dataset)");
  // Per output, in row order: replicas hand their parts in order.
  std::vector<std::vector<Tensor>> parts(outputs_.size());
  int64_t total = 0;
  Execution execution = predict_execution(*runtime_, *this);
  predict_executions(execution, source, strategy_of(*runtime_), config.callbacks,
                     [&](int64_t, int o, const Tensor& pr) {
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

}  // namespace lockstep
