// Builds and compiles the step graph of a Model.
#include "trainers/program.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/core/config.h"
#include "lockstep/graph/autodiff.h"
#include "lockstep/graph/backend.h"
#include "lockstep/graph/device_system.h"
#include "lockstep/graph/sharding.h"
#include "trainers/predict_tiles.h"

namespace lockstep {

// ---- multi-step execution -------------------------------------------------------------------

void Program::stage(int slots) {
  LS_CHECK(slots >= 1, "Program::stage: needs at least 1 slot, got ", slots);
  while (int(staged_.size()) < slots) {
    std::vector<Tensor> slot;
    for (int j = 0; j < exe_->num_inputs(); ++j) {
      const Tensor& in = tile_ ? full_in_[size_t(j)] : exe_->input(j);
      slot.push_back(Tensor::empty(in.shape(), in.dtype()));
    }
    staged_.push_back(std::move(slot));
  }
  // (a predict slot's outputs are allocated by their first copy: eager outputs exist only then)
  if (kind_ == Kind::predict)
    staged_outs_.resize(staged_.size(), std::vector<Tensor>(size_t(outputs_)));
}

const Tensor& Program::staged_prediction(int slot, int o) const {
  LS_CHECK(kind_ == Kind::predict && slot >= 0 && slot < int(staged_outs_.size()) && o >= 0 &&
               o < outputs_ && staged_outs_[size_t(slot)][size_t(o)].defined(),
           "Program::staged_prediction: no predictions of output ", o, " in slot ", slot, " (",
           staged_slots(), " staged slots, ", outputs_,
           " outputs; predict programs after run_steps)");
  return staged_outs_[size_t(slot)][size_t(o)];
}

Tensor& Program::staged_input(int slot, int j) {
  LS_CHECK(slot >= 0 && slot < staged_slots(), "Program::staged_input: no slot ", slot, " (",
           staged_slots(), " staged slots; call stage(n) first)");
  LS_CHECK(j >= 0 && j < exe_->num_inputs(), "Program::staged_input: no step input ", j, " (",
           exe_->num_inputs(), " inputs)");
  return staged_[size_t(slot)][size_t(j)];
}

int Program::run_steps(int first_slot, int n, uint64_t first_step) {
  LS_CHECK(first_slot >= 0 ? n >= 1 && first_slot + n <= staged_slots() : n == 1,
           "Program::run_steps: slots [", first_slot, ", ", first_slot + n, ") of ", staged_slots(),
           " staged slots (first_slot < 0 runs the one step written into the inputs)");
  // (evaluate goes on after a NaN loss, as with one step per execution)
  const bool check_loss = kind_ == Kind::train && !partial_;  // (a shard's: the last shard's)
  if (unrolled_ && first_slot >= 0 && n % unrolled_steps_ == 0)
    return run_unrolled(first_slot, n, first_step);
  ran_unrolled_ = false;
  for (int k = 0; k < n; ++k) {
    set_step(first_step + uint64_t(k));
    if (tile_ && first_slot >= 0) {  // a tiled predict step: from its slot into its outputs
      std::vector<Tensor>& outs = staged_outs_[size_t(first_slot + k)];
      for (int o = 0; o < outputs_; ++o)
        if (!outs[size_t(o)].defined())
          outs[size_t(o)] =
              Tensor::empty(full_out_[size_t(o)].shape(), full_out_[size_t(o)].dtype());
      run_tiles(staged_[size_t(first_slot + k)], outs);
      continue;
    }
    if (first_slot >= 0) {
      const std::vector<Tensor>& slot = staged_[size_t(first_slot + k)];
      for (int j = 0; j < int(slot.size()); ++j) exe_->copy_input_from_host(j, slot[size_t(j)]);
    }
    run();
    if (kind_ == Kind::predict && first_slot >= 0)
      for (int o = 0; o < outputs_; ++o)
        exe_->copy_output_to_host(o, staged_outs_[size_t(first_slot + k)][size_t(o)]);
    if (check_loss && nonfinite_replicas() > 0) return k + 1;
  }
  return n;
}

// Each unrolled_steps_ staged steps in one call of the unrolled program: the steps' inputs side
// by side, the variables carried from step to step on the device. A NaN or inf loss is seen
// after the call (its last step's), as Keras sees it after an execution.
int Program::run_unrolled(int first_slot, int n, uint64_t first_step) {
  const int per_step = exe_->num_inputs();
  for (int done = 0; done < n; done += unrolled_steps_) {
    for (int k = 0; k < unrolled_steps_; ++k) {
      const std::vector<Tensor>& slot = staged_[size_t(first_slot + done + k)];
      for (int j = 0; j < per_step; ++j)
        unrolled_->copy_input_from_host(k * per_step + j, slot[size_t(j)]);
    }
    unrolled_->set_step(first_step + uint64_t(done));
    unrolled_->run();
    ran_unrolled_ = true;
    if (!partial_ && nonfinite_replicas() > 0) return done + unrolled_steps_;
  }
  return n;
}

// The step graph at `batch` rows: placeholders, the model's forward, (train/eval) the loss and
// updates; with replication, replica `replica`'s copies of the variables.
Program::Built Program::build(const Network& model, const ResolvedCompile& resolved, int64_t batch,
                              Replication* replication, int replica) {
  const CompileConfig& cfg = resolved.config;
  Built b;
  Graph& g = b.g;
  for (int i = 0; i < inputs_; ++i) {
    const KTensor& in = model.inputs()[size_t(i)];
    std::string name = "x";
    if (inputs_ > 1) name += std::to_string(i);
    b.inputs.push_back(g.input({in.dtype(), in.shape().with_dim(0, batch)}, name));
  }
  CallContext ctx{g, kind_ == Kind::train, random_seed()};
  // (device replicas: synchronized BatchNormalization's cross_replica_sum is an all_reduce in
  // the program, which needs no group; it takes the reducer's)
  if (kind_ == Kind::train && replication && (replication->reduces() || device_replicas_ > 1)) {
    ctx.replica_group = replication->reducer().group();
    ctx.replica = replica;
    // Local replica threads of one process, running cpu kernels one shard each: synchronized
    // statistics are pooled by batch_norm_train's kernels themselves (ReplicaExchange).
    const distribute::StrategyImpl& s = replication->strategy();
    ctx.replicas_in_process = s.num_workers == 1 && device_replicas_ == 1 && s.backend.empty() &&
                              find_backend(cfg.backend).splits_batch_over_host_threads() &&
                              !cfg.run_eagerly && replication->shards_per_replica() == 1;
    ctx.synchronize_batch_norm = replication->threads();
  }
  std::vector<Value> preds = model.call(ctx, b.inputs);
  if (replication && replication->shards_per_replica() > 1)
    for (int i = 0; i < g.size(); ++i)
      LS_CHECK(g.node(i).op != op::cross_replica_sum, "model '", model.name(),
               "': BatchNormalization(synchronized=true) cannot run with gradient shards (",
               replication->shards_per_replica(),
               " per replica, run one after another; lockstep/core/config.h): use plain "
               "BatchNormalization, or as many shards as replicas in sync");
  // A mixed-precision model's output is in its compute dtype; the loss, the metrics and
  // predict() take it in f32 (as Keras's losses cast y_pred).
  for (Value& pred : preds)
    if (is_float(g.type(pred).dtype) && g.type(pred).dtype != DType::f32)
      pred = g.add(op::cast, {pred}, Attrs{{"dtype", std::string("float32")}});
  if (kind_ == Kind::predict) {
    b.outputs = preds;
  } else {
    b.outputs = add_loss_and_updates(model, resolved, g, preds, b.inputs, ctx.losses,
                                     ctx.output_masks, replication, replica);
  }
  if (replication && replica > 0) {  // this replica's copies of every variable
    // ... but the learning rate, which every replica reads from one variable (set_learning_rate
    // then reaches them all; no program writes it).
    const Variable* shared_rate =
        cfg.optimizer ? cfg.optimizer->learning_rate_variable().get() : nullptr;
    // A gradient shard's program reads its replica's weights (lockstep/core/config.h).
    const int owner = replication->owner(replica);
    for (int i = 0; i < g.size(); ++i) {
      Node& nd = g.node(i);
      if (nd.variable && nd.variable.get() != shared_rate)
        nd.variable = replication->variable(nd.variable, nd.variable->trainable ? owner : replica);
    }
  }
  return b;
}

std::unique_ptr<Executable> Program::compile(const CompileConfig& cfg, Built& b,
                                             Replication* replication, int replica, int steps,
                                             int team_override) {
  CompileOptions opts;
  opts.steps = steps;
  opts.backend = cfg.backend;
  // (XlaStrategy: the models in its scope compile for its backend, on its devices)
  if (replication && !replication->strategy().backend.empty())
    opts.backend = replication->strategy().backend;
  DeviceReplicasScope devices(device_replicas_);
  ShardingPlanScope partitioned(replication ? replication->strategy().sharding : nullptr);
  opts.eager = cfg.run_eagerly;
  opts.seed = random_seed();
  if (!cfg.run_eagerly) opts.residence = residence_;
  if (replication)
    opts.replica =
        uint32_t(replication->strategy().worker_index * replication->local_replicas() + replica);

    // Kernels plan their parallel decomposition (oneDNN primitives, per-thread scratch) for the
    // OpenMP thread count at creation; a replica thread runs with its own, smaller team, so
    // compile for that count (planning for 2 threads and running on 1 made the first conv's
    // weight gradient 6x slower).
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  const int team = team_override > 0 ? team_override
                   : replication     ? replication->strategy().replica_threads
                                     : 0;
  if (team > 0) omp_set_num_threads(team);
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{saved};
#endif
  return std::make_unique<Executable>(b.g, b.inputs, b.outputs, opts);
}

namespace {

// model's compile_config() resolved again, with these trackers and metrics (on output 0).
ResolvedCompile with_metrics(const Model& model, MetricPtr loss_tracker,
                             const std::vector<MetricPtr>& metrics,
                             const std::vector<MetricPtr>& weighted_metrics) {
  ResolvedCompile r = resolve_compile(model.compile_config(), model.name(), model.output_names());
  r.loss_tracker = std::move(loss_tracker);
  r.metrics = metrics, r.metric_outputs.assign(metrics.size(), 0);
  r.weighted_metrics = weighted_metrics;
  r.weighted_metric_outputs.assign(weighted_metrics.size(), 0);
  return r;
}

}  // namespace

Program::Program(const Model& model, Kind kind, int64_t batch, MetricPtr loss_tracker,
                 const std::vector<MetricPtr>& metrics,
                 const std::vector<MetricPtr>& weighted_metrics, Replication* replication,
                 int replica, int weighted)
    : Program(model, with_metrics(model, std::move(loss_tracker), metrics, weighted_metrics), kind,
              batch, replication, replica, weighted) {}

namespace {

// The device replicas a program of `batch` rows runs as under `replication`'s strategy
// (StrategyImpl::device_replicas): all of them when the rows divide among them. Otherwise a
// train step is an error; an evaluate or predict batch (a last, partial one) runs on one device.
int device_replicas_for(const Network& model, Program::Kind kind, int64_t batch,
                        const Replication* replication) {
  const int devices = replication ? replication->strategy().device_replicas : 1;
  // (a strategy that partitions its programs itself compiles one program on the whole batch)
  const bool spmd = replication && replication->strategy().sharding;
  if (devices == 1 || batch % devices == 0) return spmd ? 1 : devices;
  const int64_t below = batch / devices * devices, above = below + devices;
  LS_CHECK(kind != Program::Kind::train, "model '", model.name(), "': a training batch of ", batch,
           " rows does not divide among the ", devices, " devices of ",
           replication->strategy().name,
           " (one replica per device); use a batch size that is "
           "a multiple of ",
           devices, " (", below > 0 ? std::to_string(below) + " or " : "", above,
           "), or batch the dataset with drop_remainder so the last batch is full too");
  return 1;
}

}  // namespace

Program::Program(const Network& model, const ResolvedCompile& resolved, Kind kind, int64_t batch,
                 Replication* replication, int replica, int weighted)
    : kind_(kind),
      batch_(batch),
      weighted_(weighted > 0 && kind != Kind::predict),
      weight_columns_(weighted_ ? weighted : 0) {
  const CompileConfig& cfg = resolved.config;
  LS_CHECK(!model.inputs().empty() && !model.outputs().empty(), "model '", model.name(),
           "' has no inputs or no outputs");
  inputs_ = int(model.inputs().size());
  outputs_ = int(model.outputs().size());
  targets_ = kind == Kind::predict ? 0 : outputs_;
  partial_ = kind == Kind::train && replication && replica >= replication->local_replicas();
  device_replicas_ = device_replicas_for(model, kind, batch, replication);
  rows_ = batch / device_replicas_;
  Built full = build(model, resolved, rows_, replication, replica);
  hold_on_device(model, resolved);
  const int64_t widest =
      kind == Kind::predict ? plan_predict_tiles(model, resolved, full, replication, replica) : 0;
  if (!exe_) exe_ = compile(cfg, full, replication, replica);
  // (not replicated: a host-side gradient all-reduce needs the host between steps)
  if (kind == Kind::train && cfg.steps_per_execution > 1 && !cfg.run_eagerly && !replication &&
      find_backend(cfg.backend).runs_steps_per_call()) {
    unrolled_steps_ = cfg.steps_per_execution;
    unrolled_ = compile(cfg, full, replication, replica, unrolled_steps_);
  }
  if (cfg.verbose_compile) {
    std::fprintf(stderr, "[compile] %s program, batch %lld, replica %d: %.3f s\n",
                 kind == Kind::train  ? "train"
                 : kind == Kind::eval ? "eval"
                                      : "predict",
                 (long long)batch, replica, compile_seconds());
    if (!thread_exes_.empty())
      std::fprintf(stderr, "[compile]   in %d tiles of %lld rows at once, one per thread\n",
                   tile_threads(), (long long)tile_);
    else if (tile_)
      std::fprintf(stderr, "[compile]   in tiles of %lld rows (widest activation %lld bytes/row)\n",
                   (long long)tile_, (long long)widest);
    for (auto& line : exe_->report()) std::fprintf(stderr, "[compile]   %s\n", line.c_str());
  }
}

// The variables a device backend may keep between steps: the network's weights and the
// optimizer's slots (after build(), which creates them). Not the iteration count, the learning
// rate or the metric state: the host loop reads and writes those between steps.
void Program::hold_on_device(const Network& network, const ResolvedCompile& resolved) {
  residence_ = resolved.residence;
  if (!residence_) return;
  residence_->add(network.weights());
  if (const OptimizerPtr& optimizer = resolved.config.optimizer) {
    std::vector<VariablePtr> state = optimizer->variables();
    const Variable* iterations = optimizer->iterations().get();
    const Variable* rate = optimizer->learning_rate_variable().get();
    std::erase_if(state,
                  [&](const VariablePtr& v) { return v.get() == iterations || v.get() == rate; });
    residence_->add(state);
  }
}

// Predict in row tiles (trainers/predict_tiles.h) when the rows are independent both at this
// batch and at the tile's (two batch sizes: no shape can match both by coincidence): cache tiles
// run one after the other, thread tiles (where no cache tiles apply) all at once. Compiles exe_
// (and tail_ / thread_exes_) when it tiles; returns the widest activation's bytes per row.
int64_t Program::plan_predict_tiles(const Network& model, const ResolvedCompile& resolved,
                                    Built& full, Replication* replication, int replica) {
  const CompileConfig& cfg = resolved.config;
  int64_t widest = 0;
  if (cfg.run_eagerly || device_replicas_ != 1 ||
      !rows_independent(full.g, full.inputs, full.outputs, batch_, nullptr, &widest))
    return widest;
  const int64_t tile = predict_tile_rows(batch_, widest);
  const int threads = tile == 0 && find_backend(cfg.backend).splits_batch_over_host_threads() &&
                              !replication && !config::op_determinism_enabled()
                          ? predict_thread_tiles(batch_)
                          : 1;
  const int64_t rows = tile > 0 ? tile : threads > 1 ? batch_ / threads : 0;
  if (rows == 0) return widest;
  Built part = build(model, resolved, rows, replication, replica);
  if (!rows_independent(part.g, part.inputs, part.outputs, rows)) return widest;
  tile_ = rows;
  if (tile > 0) {
    exe_ = compile(cfg, part, replication, replica);
    if (const int64_t tail = batch_ % tile; tail > 0) {
      Built rest = build(model, resolved, tail, replication, replica);
      tail_ = compile(cfg, rest, replication, replica);
    }
  } else {
    exe_ = compile(cfg, part, replication, replica, 1, /*team=*/1);
    for (int t = 1; t < threads; ++t)
      thread_exes_.push_back(compile(cfg, part, replication, replica, 1, /*team=*/1));
    thread_errors_.resize(size_t(threads));
  }
  for (Value v : full.inputs)
    full_in_.push_back(Tensor::empty(full.g.type(v).shape, full.g.type(v).dtype));
  for (Value v : full.outputs)
    full_out_.push_back(Tensor::empty(full.g.type(v).shape, full.g.type(v).dtype));
  return widest;
}

// Rows [r, end) of `in` (the step's inputs) through e into the same rows of `out`.
void Program::run_rows(Executable& e, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                       int64_t r, int64_t end) {
  for (int j = 0; j < int(in.size()); ++j) e.copy_input_from_host(j, in[size_t(j)].slice(r, end));
  e.run();
  for (int o = 0; o < int(out.size()); ++o) {
    Tensor rows = out[size_t(o)].slice(r, end);
    e.copy_output_to_host(o, rows);
  }
}

// A tiled predict batch: rows [r, r + tile) of `in` (the step's inputs) through the tile program
// into the same rows of `out` (its predictions); the last rows through the tail program.
void Program::run_tiles(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  if (!thread_exes_.empty()) return run_thread_tiles(in, out);
  for (int64_t r = 0; r < batch_; r += tile_)
    run_rows(batch_ - r >= tile_ ? *exe_ : *tail_, in, out, r, std::min(batch_, r + tile_));
}

// Thread tiles: tile t (rows [t * tile_, (t + 1) * tile_)) on OpenMP thread t, through its own
// single-threaded program, all at once. Inside the parallel region the kernels' own OpenMP
// loops and oneDNN run on the calling thread alone (nested regions are inactive).
void Program::run_thread_tiles(const std::vector<Tensor>& in, std::vector<Tensor>& out) {
  std::vector<std::string>& errors = thread_errors_;
#pragma omp parallel num_threads(tile_threads())
  {
    const int t = omp_get_thread_num();
    try {
      run_rows(t == 0 ? *exe_ : *thread_exes_[size_t(t - 1)], in, out, t * tile_, (t + 1) * tile_);
    } catch (const std::exception& ex) {  // (an exception must not leave the region)
      errors[size_t(t)] = ex.what();
    }
  }
  for (std::string& e : errors)
    if (!e.empty()) LS_FAIL(std::exchange(e, std::string()));
}

namespace {

// The values a step's metric updates read: the total loss, each output's loss, targets and
// predictions.
struct StepValues {
  Value loss;
  const std::vector<Value>& output_losses;
  const std::vector<Value>& ys;
  const std::vector<Value>& preds;
};

// [N, T, ...] -> [N * T, ...]: a masked output's steps as samples.
Value steps_as_rows(Graph& g, Value x) {
  std::vector<int64_t> s = g.type(x).shape.vec();
  std::vector<int64_t> out{-1};
  out.insert(out.end(), s.begin() + 2, s.end());
  return g.add(op::reshape, {x}, Attrs{{"shape", out}});
}

// A masked output's metric weights, one per step [N * T]: the mask [N, T] times the sample
// weights [N] (invalid: none), as Keras's MeanMetricWrapper (apply_mask, reduction "sum").
Value step_weights(Graph& g, int64_t batch, Value mask, Value weight) {
  if (weight.valid())
    mask = g.add(op::mul, {mask, g.add(op::reshape, {weight},
                                       Attrs{{"shape", std::vector<int64_t>{batch, 1}}})});
  return g.add(op::reshape, {mask}, Attrs{{"shape", std::vector<int64_t>{-1}}});
}

// The loss trackers' and the metrics' updates (each metric on the output compile() assigned
// it); output_weights: each output's sample weights (invalid: unweighted). An output with a
// Keras mask (masks[o] valid, [N, T]) updates its metrics over its unmasked steps: each step a
// sample weighted by the mask.
void add_metric_updates(const ResolvedCompile& resolved, Graph& g, int64_t batch,
                        const StepValues& v, const std::vector<Value>& output_weights,
                        const std::vector<Value>& masks) {
  auto masked = [&](size_t o) { return o < masks.size() && masks[o].valid(); };
  // Loss trackers: Keras weights each batch's loss by its size -> per-sample copies.
  auto per_sample = [&](Value x) {
    return g.add(op::broadcast_to, {x}, Attrs{{"shape", std::vector<int64_t>{batch}}});
  };
  resolved.loss_tracker->update(g, v.ys[0], per_sample(v.loss));
  for (size_t o = 0; o < resolved.output_loss_trackers.size() && o < v.preds.size(); ++o)
    resolved.output_loss_trackers[o]->update(g, v.ys[o], per_sample(v.output_losses[o]));
  for (size_t i = 0; i < resolved.metrics.size(); ++i) {
    const size_t o = size_t(resolved.metric_outputs.at(i));
    if (masked(o))
      resolved.metrics[i]->update_weighted(g, steps_as_rows(g, v.ys[o]),
                                           steps_as_rows(g, v.preds[o]),
                                           step_weights(g, batch, masks[o], Value{}));
    else
      resolved.metrics[i]->update(g, v.ys[o], v.preds[o]);
  }
  for (size_t i = 0; i < resolved.weighted_metrics.size(); ++i) {
    const size_t o = size_t(resolved.weighted_metric_outputs.at(i));
    if (masked(o))
      resolved.weighted_metrics[i]->update_weighted(
          g, steps_as_rows(g, v.ys[o]), steps_as_rows(g, v.preds[o]),
          step_weights(g, batch, masks[o], output_weights[o]));
    else
      resolved.weighted_metrics[i]->update_weighted(g, v.ys[o], v.preds[o], output_weights[o]);
  }
}

// One output's loss from its per-sample values `per` ([N], or [N, T, ...] for a sequence
// output), its sample weights `weight` ([N]; invalid: none) and its Keras mask ([N, T];
// invalid: none), as Keras's reduce_weighted_values with "sum_over_batch_size": the mean of
// per * weight over every element; with a mask (keras/src/losses/loss.py apply_mask)
// sum(per * weight * mask) / sum(mask), 0 when every step is masked.
Value output_loss_of(Graph& g, int64_t rows, Value per, Value weight, Value mask) {
  const Attrs mean0{{"axes", std::vector<int64_t>{0}}, {"keepdims", false}};
  if (g.type(per).shape.rank() <= 1 && !mask.valid()) {
    if (weight.valid()) per = g.add(op::mul, {per, weight});
    return g.add(op::reduce_mean, {per}, mean0);
  }
  Value flat = g.add(op::reshape, {per}, Attrs{{"shape", std::vector<int64_t>{rows, -1}}});
  if (weight.valid())
    flat = g.add(op::mul, {flat, g.add(op::reshape, {weight},
                                       Attrs{{"shape", std::vector<int64_t>{rows, 1}}})});
  const Attrs all{{"axes", std::vector<int64_t>{}}, {"keepdims", false}};
  if (!mask.valid()) return g.add(op::reduce_mean, {flat}, all);
  Value m = g.add(op::reshape, {mask}, Attrs{{"shape", std::vector<int64_t>{rows, -1}}});
  Value num = g.add(op::reduce_sum, {g.add(op::mul, {flat, m})}, all);
  Value den = g.add(op::reduce_sum, {m}, all);
  return g.add(op::div, {num, g.add(op::maximum, {den, g.scalar(1e-12f)})});
}

}  // namespace

// The loss — Keras's "sum_over_batch_size": mean(per_sample) unweighted, sum(per_sample * w) /
// batch weighted (so weights summing to other than the batch size scale it) — of each output,
// summed with the outputs' loss weights, plus the layers' own losses; then (train) the
// gradients, their all-reduce and the optimizer update, and the metric updates. Adds the label
// inputs (one per output) and the weight input; returns {loss, preds...[, nonfinite]}.
std::vector<Value> Program::add_loss_and_updates(const Network& model,
                                                 const ResolvedCompile& resolved, Graph& g,
                                                 const std::vector<Value>& preds,
                                                 std::vector<Value>& inputs,
                                                 const std::vector<Value>& layer_losses,
                                                 const std::vector<Value>& output_masks,
                                                 Replication* replication, int replica) {
  const CompileConfig& cfg = resolved.config;
  const std::vector<LossPtr>& losses = resolved.output_losses;
  LS_CHECK(losses.size() == preds.size() && losses[0], "model '", model.name(),
           "': compile() needs a loss");
  std::vector<Value> ys;
  for (size_t o = 0; o < preds.size(); ++o) {
    Shape ps = g.type(preds[o]).shape;
    // Sparse labels: one per sample, or per step of a sequence output [N, T, C] -> [N, T].
    Shape shape = ps;
    if (losses[o]->label_dtype() == DType::i32)
      shape = ps.rank() > 2 ? Shape(std::vector<int64_t>(ps.begin(), ps.end() - 1)) : Shape{rows_};
    std::string name = "y";
    if (preds.size() > 1) name += std::to_string(o);
    ys.push_back(g.input({losses[o]->label_dtype(), shape}, name));
    inputs.push_back(ys.back());
  }
  Value sample_weight;
  std::vector<Value> output_weights(preds.size());  // each output's [batch] weights
  if (weighted_) {
    LS_CHECK(weight_columns_ == 1 || weight_columns_ == int(preds.size()), "model '", model.name(),
             "': sample weights for ", weight_columns_, " outputs, but it has ", preds.size());
    const Shape shape = weight_columns_ == 1 ? Shape{rows_} : Shape{rows_, weight_columns_};
    inputs.push_back(sample_weight = g.input({DType::f32, shape}, "sample_weight"));
    for (size_t o = 0; o < preds.size(); ++o) {
      if (weight_columns_ == 1) {
        output_weights[o] = sample_weight;
        continue;
      }
      Value column = g.add(op::slice, {sample_weight},
                           Attrs{{"begin", std::vector<int64_t>{0, int64_t(o)}},
                                 {"size", std::vector<int64_t>{rows_, 1}}});
      output_weights[o] =
          g.add(op::reshape, {column}, Attrs{{"shape", std::vector<int64_t>{rows_}}});
    }
  }
  Value loss;
  std::vector<Value> output_losses;
  for (size_t o = 0; o < preds.size(); ++o) {
    Value per = losses[o]->per_sample(g, ys[o], preds[o]);
    Value mask = o < output_masks.size() ? output_masks[o] : Value{};
    Value output_loss = output_loss_of(g, rows_, per, output_weights[o], mask);
    output_losses.push_back(output_loss);
    const double weight = resolved.loss_weights.at(o);
    Value term =
        weight == 1.0 ? output_loss : g.add(op::mul, {output_loss, g.scalar(float(weight))});
    loss = o == 0 ? term : g.add(op::add, {loss, term});
  }
  for (Value extra : layer_losses) loss = g.add(op::add, {loss, extra});
  Value nonfinite;             // replicated: replicas (all workers) whose loss was NaN or inf
  std::vector<Value> started;  // a gradient shard's buckets (no update: the last shard's)
  if (kind_ == Kind::train) {
    LS_CHECK(cfg.optimizer, "model '", model.name(), "': compile() needs an optimizer to fit");
    auto vars = model.trainable_weights();
    std::vector<Value> reads;
    for (auto& v : vars) reads.push_back(g.variable(v));
    auto grads = gradients(g, loss, reads);
    if (replication && replication->reduces())
      grads = replication->reducer().insert(g, grads, replica, loss, &nonfinite,
                                            partial_ ? &started : nullptr);
    if (!partial_) cfg.optimizer->apply(g, grads, vars);
  }
  add_metric_updates(resolved, g, rows_, {loss, output_losses, ys, preds}, output_weights,
                     output_masks);
  std::vector<Value> outputs{loss};
  outputs.insert(outputs.end(), preds.begin(), preds.end());
  if (nonfinite.valid()) outputs.push_back(nonfinite), has_nonfinite_ = true;
  outputs.insert(outputs.end(), started.begin(), started.end());  // (kept: they have effects)
  return outputs;
}

}  // namespace lockstep
