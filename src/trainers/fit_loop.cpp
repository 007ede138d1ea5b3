// Model::fit's host loop (see fit_loop.h for its parts). A step takes one batch from a Source,
// takes this worker's rows of it, splits them across the local replicas (one when the model is
// not replicated), copies each share into its replica's program and runs the replicas
// together; the gradient all-reduce is inside the programs.
#include "trainers/fit_loop.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/core/config.h"
#include "lockstep/trainers/preemption.h"

namespace lockstep {

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<VariablePtr> metric_variables(const Model& model) {
  std::vector<VariablePtr> variables;
  for (auto& metric : model.metrics())
    for (auto& variable : metric->variables()) variables.push_back(variable);
  return variables;
}

}  // namespace

std::pair<int64_t, int64_t> replica_rows(int64_t rows, int parts, int part) {
  const int64_t base = rows / parts, extra = rows % parts;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

void reset_metrics(const Model& model, Replication* replication) {
  if (replication) replication->fold_into_primary(metric_variables(model));
  for (auto& metric : model.metrics()) metric->reset();
}

Logs read_metrics(const Model& model, Replication* replication, const std::string& prefix,
                  bool across_workers) {
  Logs logs;
  auto variables = metric_variables(model);
  if (replication) replication->fold_into_primary(variables);
  std::vector<Tensor> saved;  // this worker's own totals, put back after reading the sums
  if (across_workers && replication && replication->strategy().num_workers > 1) {
    std::vector<double> all;
    for (auto& v : variables)
      for (float f : v->value.to_vector()) all.push_back(f);
    replication->strategy().allreduce_workers(all.data(), all.size());
    size_t k = 0;
    for (auto& v : variables) {
      saved.push_back(v->value.clone());
      float* values = v->value.data<float>();
      for (int64_t i = 0; i < v->value.numel(); ++i) values[i] = float(all[k++]);
    }
  }
  const std::vector<std::string> names = model.metric_log_names();
  const std::vector<MetricPtr> metrics = model.metrics();
  for (size_t i = 0; i < metrics.size(); ++i) logs[prefix + names[i]] = metrics[i]->result();
  for (size_t i = 0; i < saved.size(); ++i) variables[i]->value.copy_from(saved[i]);
  return logs;
}

FitLoop::FitLoop(Model& model, ModelRuntime& runtime, Model::Source& source, FitConfig& config)
    : model_(model),
      runtime_(runtime),
      source_(source),
      config_(config),
      local_replicas_(runtime.train_replication() ? runtime.train_replication()->local_replicas()
                                                  : 1),
      strategy_(runtime.train_replication() ? &runtime.train_replication()->strategy() : nullptr),
      workers_(strategy_ ? strategy_->num_workers : 1),
      thread_replicas_(runtime.thread_replicas() > 1),
      chief_(!strategy_ || strategy_->is_chief()),
      from_arrays_(dynamic_cast<TensorSource*>(&source) != nullptr),
      replica_programs_(static_cast<size_t>(local_replicas_)),
      replica_weights_(static_cast<size_t>(local_replicas_)),
      replica_first_rows_(static_cast<size_t>(local_replicas_)),
      replica_steps_(static_cast<size_t>(local_replicas_)) {
  LS_CHECK(config.epochs >= 0 && config.initial_epoch >= 0,
           "fit: epochs and initial_epoch must be >= 0");
  if (!chief_) config.verbose = 0;  // only the chief prints progress
  prepare_shards();
}

Replication* FitLoop::replication() const { return runtime_.train_replication(); }

// ---- gradient shards ----------------------------------------------------------------------

void FitLoop::prepare_shards() {
  const int replicas = local_replicas_ * workers_;
  shards_ = config::op_determinism_enabled() ? config::op_determinism_shards() : 0;
  if (shards_ > 0) {
    LS_CHECK(shards_ % replicas == 0, "fit: ", shards_,
             " gradient shards (op determinism, "
             "lockstep/core/config.h) cannot be split across ",
             replicas, " replicas in sync: the shards must be a multiple of the replicas");
    LS_CHECK(replicas <= 2 || shards_ == replicas, "fit: ", shards_, " gradient shards with ",
             replicas,
             " replicas in sync: a replica can run several shards only with 1 or 2 replicas in "
             "sync (the all-reduce of more parts does not follow the shards' fixed order)");
    LS_CHECK(workers_ == 1 || strategy_->options.all_reduce_dtype == DType::f32,
             "fit: gradient shards (op determinism) need a float32 all-reduce "
             "(StrategyOptions::all_reduce_dtype is ",
             dtype_name(strategy_->options.all_reduce_dtype), ")");
  }
  shards_per_replica_ = shards_ > 0 ? shards_ / replicas : 1;
  programs_ = local_replicas_ * shards_per_replica_;
  runtime_.set_shards_per_replica(shards_per_replica_);
  replica_programs_.resize(size_t(programs_));
  replica_weights_.resize(size_t(programs_));
  replica_first_rows_.resize(size_t(programs_));
}

std::pair<int64_t, int64_t> FitLoop::program_rows(const WorkerBatch& batch, int p) const {
  const int k = shards_per_replica_;
  // The program's shard among this worker's: replica r's are r * k .. r * k + k - 1.
  const int shard = k == 1 ? p
                    : p < local_replicas_
                        ? p * k + k - 1
                        : (p - local_replicas_) / (k - 1) * k + (p - local_replicas_) % (k - 1);
  if (shards_ > 0 && workers_ > 1 && from_arrays_) {  // the shard of the global batch
    auto [begin, end] =
        replica_rows(batch.global_rows, shards_, strategy_->worker_index * programs_ + shard);
    return {begin - batch.first_row, end - batch.first_row};
  }
  return replica_rows(batch.rows, programs_, shard);
}

History FitLoop::run() {
  const StartPoint start = begin_training();
  for (int epoch = start.epoch; epoch < config_.epochs && !model_.stop_training; ++epoch) {
    const bool first_epoch = epoch == start.epoch;
    run_epoch(epoch, first_epoch ? start.step : 0, first_epoch);
  }
  return end_training();
}

// ---- step planning ----------------------------------------------------------------------

// Tells the callbacks training begins; a BackupAndRestore among them may set a resume point
// (Model::set_resume_point), which wins over initial_epoch.
FitLoop::StartPoint FitLoop::begin_training() {
  history_.replicas = strategy_ && !thread_replicas_ ? strategy_->replicas_in_sync() : 1;
  history_.thread_replicas = thread_replicas_ ? local_replicas_ : 1;
  history_.workers = workers_;
  model_.stop_training = false;
  runtime_.fit_progress() = {};
  runtime_.set_resume_point(-1, 0);
  for (auto& cb : config_.callbacks) cb->set_model(&model_);
  for (auto& cb : config_.callbacks) cb->on_train_begin({});
  StartPoint start{config_.initial_epoch, 0};
  if (runtime_.resume_epoch() >= 0) start = {runtime_.resume_epoch(), runtime_.resume_step()};
  runtime_.set_resume_point(-1, 0);
  return start;
}

// Starts the source's epoch at first_step; returns the epoch's step count (-1: until the data
// ends). steps_per_epoch caps it (or sets it, for data of unknown length).
int64_t FitLoop::plan_epoch(int epoch, int64_t first_step, bool first_epoch) {
  source_.begin_epoch(epoch);
  if (first_step > 0) skip_to_step(epoch, first_step);
  int64_t steps = source_.steps();
  if (workers_ > 1 && from_arrays_ && first_epoch) check_workers_agree_on_steps(steps);
  if (config_.steps_per_epoch > 0)
    steps = steps < 0 ? config_.steps_per_epoch : std::min(steps, config_.steps_per_epoch);
  return steps;
}

// Resuming inside an epoch: a Dataset that continues across epochs (steps_per_epoch given)
// skips the earlier epochs' batches too; arrays replay the epoch's permutation up to the step.
void FitLoop::skip_to_step(int epoch, int64_t step) {
  if (auto* dataset = dynamic_cast<DatasetSource*>(&source_)) {
    dataset->skip(config_.steps_per_epoch > 0 ? int64_t(epoch) * config_.steps_per_epoch + step
                                              : step);
  } else {
    for (int64_t k = 0; k < step && source_.next(); ++k) {
    }
  }
}

// Arrays under several workers: every worker must pass the same arrays (the strategy splits
// each global batch), so every worker must count the same batches: sum and sum of squares.
void FitLoop::check_workers_agree_on_steps(int64_t steps_this_worker) {
  double sums[2] = {double(steps_this_worker),
                    double(steps_this_worker) * double(steps_this_worker)};
  strategy_->allreduce_workers(sums, 2);
  LS_CHECK(sums[1] * workers_ == sums[0] * sums[0],
           "fit: the workers disagree on the number of batches per epoch (this worker: ",
           steps_this_worker, ", mean over workers: ", sums[0] / workers_,
           "); under MultiWorkerMirroredStrategy every worker passes the same arrays (the "
           "strategy splits each global batch), or pass a Dataset");
}

// ---- one epoch ----------------------------------------------------------------------------

void FitLoop::run_epoch(int epoch, int64_t first_step, bool first_epoch) {
  if (config_.verbose) std::printf("Epoch %d/%d\n", epoch + 1, config_.epochs), std::fflush(stdout);
  for (auto& cb : config_.callbacks) cb->on_epoch_begin(epoch, {});
  reset_metrics(model_, replication());
  // Thread replicas are the user's one model: weights a callback wrote between epochs
  // (on_epoch_end / on_epoch_begin, to replica 0's variables) reach every replica.
  if (thread_replicas_) replicas_need_sync_ = true;
  const auto epoch_start = Clock::now();
  const double compile_seconds_before = runtime_.compile_seconds();
  input_wait_seconds_ = 0;
  const int64_t steps = plan_epoch(epoch, first_step, first_epoch);
  ProgressBar bar(int(std::max<int64_t>(steps, 0)), config_.verbose);
  if (replication()) replication()->reducer().reset_timers();
  Logs logs = run_steps(epoch, first_step, steps, bar);
  average_replica_statistics();
  const double epoch_seconds =
      seconds_since(epoch_start) - (runtime_.compile_seconds() - compile_seconds_before);
  end_epoch(epoch, logs, epoch_seconds, bar);
}

// The epoch's steps, in executions of steps_per_execution steps; the batch callbacks and the
// progress bar see each execution once, as in Keras 3: on_train_batch_begin(its first step),
// on_train_batch_end(its last step, the logs after it). Returns the last execution's (local)
// logs.
Logs FitLoop::run_steps(int epoch, int64_t first_step, int64_t steps, ProgressBar& bar) {
  const int steps_per_execution = runtime_.resolved().config.steps_per_execution;
  Logs logs;
  bool end_of_data = false;
  int64_t step = first_step;
  while ((steps < 0 || step < steps) && !model_.stop_training && !end_of_data) {
    const int64_t end_step = steps < 0 ? step + steps_per_execution
                                       : std::min<int64_t>(step + steps_per_execution, steps);
    for (auto& cb : config_.callbacks) cb->on_train_batch_begin(int(step), {});
    const int64_t next_step = run_execution(epoch, step, end_step, end_of_data);
    if (next_step == step) break;  // no step ran: end of data
    // Per-step logs are this worker's (its local replicas'): summing them over workers would
    // put a blocking round trip between every two steps. The epoch's logs are global.
    logs = read_metrics(model_, replication(), "", workers_ == 1);
    if (!model_.stop_training) bar.update(int(next_step), logs);
    for (auto& cb : config_.callbacks) cb->on_train_batch_end(int(next_step - 1), logs);
    stop_if_preempted(epoch, next_step);
    step = next_step;
  }
  return logs;
}

int64_t FitLoop::run_execution(int epoch, int64_t first_step, int64_t end_step, bool& end_of_data) {
  const auto wait_start = Clock::now();
  const double compile_seconds_before = runtime_.compile_seconds();
  const int64_t next_step = stage_execution(first_step, end_step, end_of_data);
  input_wait_seconds_ +=
      seconds_since(wait_start) - (runtime_.compile_seconds() - compile_seconds_before);
  for (size_t i = 0; i < num_runs_; ++i) {
    const Run& run = runs_[i];
    const int ran = run_replicas(run);
    samples_ += run.rows * ran;
    runtime_.fit_progress().samples = samples_;
    if (stop_on_nonfinite_loss(epoch, run.first_step + ran - 1)) return run.first_step + ran;
  }
  return next_step;
}

// ---- replica dispatch ---------------------------------------------------------------------

FitLoop::WorkerBatch FitLoop::next_batch() {
  WorkerBatch batch;
  batch.available = source_.next();
  batch.rows = batch.available ? source_.size() : 0;
  batch.global_rows = batch.rows;
  const bool split_arrays = workers_ > 1 && from_arrays_;  // the batch is the global batch
  if (batch.available && split_arrays) {
    auto [begin, end] = replica_rows(batch.rows, workers_, strategy_->worker_index);
    if (shards_ > 0) {  // the worker's shards of the global batch (lockstep/core/config.h)
      const int first = strategy_->worker_index * programs_;
      begin = replica_rows(batch.rows, shards_, first).first;
      end = replica_rows(batch.rows, shards_, first + programs_ - 1).second;
    }
    batch.first_row = begin, batch.rows = end - begin;
  }
  // Arrays on several workers: the smallest worker share decides, the same on all.
  batch.too_small =
      batch.available && (split_arrays ? batch.global_rows / workers_ : batch.rows) < programs_;
  // Arrays: every worker holds the same arrays (checked at the first epoch's start) and walks
  // the same global batches, so no per-step agreement is needed. Datasets: see below.
  if (workers_ > 1 && !from_arrays_) agree_with_other_workers(batch);
  return batch;
}

// Datasets under several workers: every worker steps while all have data, every one drops the
// batch when any one's share is too small, and the gradient weights use the global row count.
void FitLoop::agree_with_other_workers(WorkerBatch& batch) {
  double flags[3] = {batch.available ? 0.0 : 1.0, double(batch.rows), batch.too_small ? 1.0 : 0.0};
  strategy_->allreduce_workers(flags, 3);
  batch.available = flags[0] == 0.0;
  batch.global_rows = int64_t(flags[1]);
  batch.too_small = flags[2] > 0;
}

void FitLoop::warn_dropped_batch(int64_t rows) {
  if (!warned_dropped_batch_ && chief_)
    std::fprintf(stderr,
                 "fit: dropping a final batch of %lld samples (fewer than the %d local replicas)\n",
                 (long long)rows, local_replicas_);
  warned_dropped_batch_ = true;
}

// Fetches and stages the batches of steps [first_step, end_step) (the runs of the execution).
int64_t FitLoop::stage_execution(int64_t first_step, int64_t end_step, bool& end_of_data) {
  num_runs_ = 0;
  slots_used_.clear();
  int64_t next_step = first_step;
  for (int64_t step = first_step; step < end_step; ++step) {
    const WorkerBatch batch = next_batch();
    if (!batch.available) {
      end_of_data = true;
      break;
    }
    next_step = step + 1;
    if (batch.too_small && thread_replicas_) {
      stage_alone(batch, step);
      continue;
    }
    if (batch.too_small) {
      warn_dropped_batch(batch.rows);
      continue;
    }
    stage_batch(batch, step);
  }
  return next_step;
}

// Copies each local replica's rows of the batch into its train program (compiled on first use
// for that batch size): into its inputs when steps_per_execution is 1, else into its next
// staging slot. Sets its weight in the gradient sum: its share of the global batch. The step
// joins the execution's last run, or starts a run when its programs or weights differ.
void FitLoop::stage_batch(const WorkerBatch& batch, int64_t step) {
  const bool staged = runtime_.resolved().config.steps_per_execution > 1;
  for (int replica = 0; replica < programs_; ++replica) {  // (a program per shard: see Run)
    auto [begin, end] = program_rows(batch, replica);
    // (the last step's program when it fits: no lookup by name on every step)
    Program* last = replica_programs_[size_t(replica)];
    if (!last || last->batch() != end - begin || last->weight_columns() != source_.weighted())
      replica_programs_[size_t(replica)] = &train_program(end - begin, replica);
    // Op determinism: random ops keyed by the example's row in the global batch (arrays: the
    // worker's rows start at first_row; a Dataset's batch is the worker's own).
    const int64_t worker_first_row =
        from_arrays_ || workers_ == 1 ? batch.first_row : int64_t(strategy_->worker_index) << 32;
    replica_first_rows_[size_t(replica)] =
        config::op_determinism_enabled() ? worker_first_row + begin : -1;
    replica_weights_[size_t(replica)] = float(double(end - begin) / double(batch.global_rows));
  }
  Run* run = num_runs_ > 0 ? &runs_[num_runs_ - 1] : nullptr;
  if (!run || run->first_step + run->steps != step || run->programs != replica_programs_ ||
      run->weights != replica_weights_ || run->first_rows != replica_first_rows_) {
    if (num_runs_ == runs_.size()) runs_.emplace_back();
    run = &runs_[num_runs_++];
    run->first_step = step, run->steps = 0, run->rows = batch.rows, run->alone = false;
    run->programs = replica_programs_;
    run->weights = replica_weights_;
    run->first_rows = replica_first_rows_;
    run->first_slots.assign(size_t(programs_), -1);
  }
  for (int replica = 0; replica < programs_; ++replica) {
    auto [begin, end] = program_rows(batch, replica);
    Program& program = *replica_programs_[size_t(replica)];
    const int64_t r0 = batch.first_row + begin, r1 = batch.first_row + end;
    if (!staged) {
      source_.copy(r0, r1, program);
      continue;
    }
    const int slot = take_slot(&program);
    source_.copy_to_slot(r0, r1, program, slot);
    if (run->steps == 0) run->first_slots[size_t(replica)] = slot;
  }
  ++run->steps;
}

// Thread replicas: a batch with fewer rows than replicas runs as a run of its own, on a train
// program of the whole model's threads that updates replica 0's variables (run_alone).
void FitLoop::stage_alone(const WorkerBatch& batch, int64_t step) {
  Program& program = runtime_.program(model_, ModelRuntime::ProgramKind::train_alone, batch.rows, 0,
                                      source_.weighted());
  if (num_runs_ == runs_.size()) runs_.emplace_back();
  Run& run = runs_[num_runs_++];
  run.first_step = step, run.steps = 1, run.rows = batch.rows, run.alone = true;
  run.programs = {&program};
  run.weights = {1.f};
  run.first_rows = {-1};
  run.first_slots = {-1};
  const int64_t r0 = batch.first_row, r1 = batch.first_row + batch.rows;
  if (runtime_.resolved().config.steps_per_execution > 1) {
    run.first_slots[0] = take_slot(&program);
    source_.copy_to_slot(r0, r1, program, run.first_slots[0]);
  } else {
    source_.copy(r0, r1, program);
  }
}

// The train program for `rows` rows on `replica`, compiled on first use. A compile for a
// whole-graph target (xla) is the slow first step of a fit (XLA's, as the first epoch on a TPU
// is): the default progress output says how long it took.
Program& FitLoop::train_program(int64_t rows, int replica) {
  const int compiled_before = runtime_.programs_compiled();
  Program& program =
      runtime_.program(model_, ModelRuntime::ProgramKind::train, rows, replica, source_.weighted());
  const std::string target = program.executable().target();
  if (runtime_.programs_compiled() > compiled_before && replica == 0 && config_.verbose &&
      !target.empty()) {
    std::printf("compiled the train step (batch %lld) for %s in %.1f s\n", (long long)rows,
                target.c_str(), program.compile_seconds());
    std::fflush(stdout);
  }
  return program;
}

// The program's next free staging slot in this execution.
int FitLoop::take_slot(Program* program) {
  for (auto& [p, used] : slots_used_)
    if (p == program) return used++;
  slots_used_.emplace_back(program, 1);
  return 0;
}

// Runs one run's steps on every local replica together, back to back inside each program (the
// programs all-reduce the gradients every step). The step id seeds the step's random streams
// (dropout, augmentation): the optimizer's iteration count, so a resumed run draws the same
// numbers; it goes up by one a step inside the run.
int FitLoop::run_replicas(const Run& run) {
  if (run.alone) return run_alone(run);
  if (replicas_need_sync_) sync_replicas_from_chief(), replicas_need_sync_ = false;

  if (replication()) replication()->reducer().set_weights(run.weights);
  replica_programs_ = run.programs;  // (stop_on_nonfinite_loss reads replica 0's)
  const uint64_t step_id = first_step_id(run);
  auto run_replica = [&](int replica) {
    if (shards_per_replica_ > 1) return run_shards(run, replica, step_id);
    Program& program = *run.programs[size_t(replica)];
    program.set_first_row(run.first_rows[size_t(replica)]);
    replica_steps_[size_t(replica)] =
        program.run_steps(run.first_slots[size_t(replica)], run.steps, step_id);
  };
  if (strategy_) {
    strategy_->run_replicas(run_replica);
  } else {
    run_replica(0);
  }
  return replica_steps_[0];
}

// A stage_alone run: replica 0's variables, the whole team of threads, no all-reduce.
int FitLoop::run_alone(const Run& run) {
  replica_programs_ = run.programs;
  const int ran = run.programs[0]->run_steps(run.first_slots[0], run.steps, first_step_id(run));
  // The other replicas take its weights (moving statistics included) and optimizer state; its
  // metric totals stay replica 0's, which the replicas' totals are summed with.
  replication()->sync_from_primary(weights_and_optimizer_state());
  return ran;
}

// The seed of a run's first step: the optimizer's iteration count (see run_replicas).
uint64_t FitLoop::first_step_id(const Run& run) const {
  const OptimizerPtr& optimizer = runtime_.resolved().config.optimizer;
  return optimizer ? uint64_t(optimizer->iterations()->value.item()) : uint64_t(run.first_step);
}

// What defines where training stands: the model's weights and the optimizer's variables.
std::vector<VariablePtr> FitLoop::weights_and_optimizer_state() const {
  std::vector<VariablePtr> variables = model_.weights();
  if (const OptimizerPtr& optimizer = runtime_.resolved().config.optimizer)
    for (auto& v : optimizer->variables()) variables.push_back(v);
  return variables;
}

// Gradient shards: each step runs the replica's shards one after another, the last one (the
// program with the all-reduce and the update) summing the earlier ones' gradients.
void FitLoop::run_shards(const Run& run, int replica, uint64_t step_id) {
  const int k = shards_per_replica_;
  int& ran = replica_steps_[size_t(replica)];
  ran = 0;
  while (ran < run.steps) {
    for (int j = 0; j < k; ++j) {
      const int p = j == k - 1 ? replica : local_replicas_ + replica * (k - 1) + j;
      Program& program = *run.programs[size_t(p)];
      program.set_first_row(run.first_rows[size_t(p)]);
      const int slot = run.first_slots[size_t(p)];
      program.run_steps(slot < 0 ? -1 : slot + ran, 1, step_id + uint64_t(ran));
    }
    ++ran;
    if (run.programs[size_t(replica)]->nonfinite_replicas() > 0) break;
  }
}

// Before the first step: every worker starts from the chief's weights and optimizer state, and
// every local replica from replica 0's.
void FitLoop::sync_replicas_from_chief() {
  if (!replication()) return;
  runtime_.residence()->host_changed();  // (the chief's broadcast writes the host values)
  if (workers_ > 1) {
    for (auto& v : weights_and_optimizer_state())
      if (v->value.dtype() == DType::f32)
        strategy_->broadcast_from_chief(v->value.data<float>(), size_t(v->value.numel()));
  }
  replication()->sync_from_primary();
}

// ---- stop handling ------------------------------------------------------------------------

// Replicated: the count of bad replicas came with the gradient all-reduce, so every replica of
// every worker stops on this same step.
bool FitLoop::stop_on_nonfinite_loss(int epoch, int64_t step) {
  const int bad_replicas = replica_programs_[0]->nonfinite_replicas();
  if (bad_replicas == 0) return false;
  const float loss = replica_programs_[0]->loss();
  const int replicas = thread_replicas_ ? 1 : local_replicas_ * workers_;  // (as the user sees)
  // (replicated: the same words on every worker, which may not see the bad value)
  const std::string what = replicas > 1 || std::isfinite(loss) ? "NaN or inf"
                           : std::isnan(loss)                  ? "NaN"
                                                               : "inf";
  history_.stopped_on_nan = true;
  history_.stop_reason =
      "loss became " + what + " at epoch " + std::to_string(epoch + 1) + ", step " +
      std::to_string(step + 1) +
      (replicas > 1
           ? " on " + std::to_string(bad_replicas) + " of " + std::to_string(replicas) + " replicas"
           : std::string()) +
      "; training stopped (lower the learning rate, or check the inputs and labels for "
      "NaN/inf)";
  std::fprintf(stderr, "\nfit: %s\n", history_.stop_reason.c_str());
  model_.stop_training = true;
  return true;
}

// Every worker makes the same check (the fingerprint holds whether the handler is installed),
// so all stop after the same step when any one was signalled.
void FitLoop::stop_if_preempted(int epoch, int64_t steps_done) {
  if (!preemption_handler_installed()) return;
  const int signal = preemption_signal();
  double signalled = signal != 0 ? 1.0 : 0.0;
  if (workers_ > 1) strategy_->allreduce_workers(&signalled, 1);
  if (signalled == 0) return;
  std::string saved;
  for (auto& cb : config_.callbacks) {
    const std::string what = cb->on_train_preempted(epoch, steps_done);
    if (!what.empty()) saved += (saved.empty() ? "" : "; ") + what;
  }
  clear_preemption_signal();
  if (config_.verbose) std::printf("\n"), std::fflush(stdout);  // (after the progress bar)
  const std::string by =
      signal != 0 ? preemption_signal_name(signal) : "a preemption signal to another worker";
  throw TrainingPreempted(
      detail::concat("fit: stopped by ", by, " after step ", steps_done, " of epoch ", epoch + 1,
                     "; ",
                     saved.empty() ? "nothing was saved (add a BackupAndRestore callback to "
                                     "resume from here)"
                                   : saved + ": run the same command again to resume"),
      signal != 0 ? signal : SIGTERM);
}

// ---- epoch logging ------------------------------------------------------------------------

// Per-replica statistics (BatchNormalization's moving mean and variance) agree again.
void FitLoop::average_replica_statistics() {
  if (!replication() || local_replicas_ * workers_ * shards_per_replica_ == 1) return;
  // Frozen layers' weights are left out: no replica changes them, so nothing goes on the wire.
  runtime_.residence()->host_changed();
  replication()->average(model_.updated_non_trainable_weights());
}

// logs holds the last step's metrics (this worker's); the epoch's logs are global.
void FitLoop::end_epoch(int epoch, Logs& logs, double epoch_seconds, ProgressBar& bar) {
  history_.train_seconds += epoch_seconds;
  runtime_.fit_progress().train_seconds = history_.train_seconds;
  history_.input_wait_seconds += input_wait_seconds_;
  if (replication()) {
    history_.allreduce_seconds += replication()->reducer().reduce_seconds();
    history_.allreduce_wait_seconds += replication()->reducer().wait_seconds();
  }
  if (logs.empty() || workers_ > 1) logs = read_metrics(model_, replication());
  add_validation_logs(logs);
  if (config_.verbose && !history_.stopped_on_nan) {
    bar.finish(logs);
    if (epoch_seconds > 0)
      std::printf("input wait: %.3f s (%.1f%% of step time)\n", input_wait_seconds_,
                  100.0 * input_wait_seconds_ / epoch_seconds);
    std::fflush(stdout);
  }
  record_epoch(epoch, logs, epoch_seconds);
}

void FitLoop::add_validation_logs(Logs& logs) {
  const ValidationData& validation = config_.validation_data;
  if (!validation.defined() || history_.stopped_on_nan) return;
  Logs val =
      validation.dataset.valid()
          ? model_.evaluate(validation.dataset, {.verbose = 0, .callbacks = config_.callbacks})
          : model_.evaluate(validation.x, validation.y,
                            {.batch_size = config_.batch_size,
                             .verbose = 0,
                             .sample_weight = validation.sample_weight,
                             .callbacks = config_.callbacks});
  for (auto& [name, value] : val) logs["val_" + name] = value;
}

// The History takes the epoch's metrics (and the input wait); the callbacks get the same logs.
void FitLoop::record_epoch(int epoch, Logs& logs, double epoch_seconds) {
  for (auto& cb : config_.callbacks) cb->add_epoch_logs(epoch, logs);
  for (auto& [name, value] : logs) history_.history[name].push_back(value);
  logs["input_wait_seconds"] = input_wait_seconds_;
  logs["input_wait_fraction"] = epoch_seconds > 0 ? input_wait_seconds_ / epoch_seconds : 0;
  history_.history["input_wait_seconds"].push_back(input_wait_seconds_);
  history_.history["input_wait_fraction"].push_back(logs["input_wait_fraction"]);
  history_.epoch.push_back(epoch);
  // Epoch-end callbacks may read or write the weights by any route (a layer's variables):
  // weights a device backend holds come to the host here, and go up again before the next step.
  if (!config_.callbacks.empty()) runtime_.residence()->host_changed();
  for (auto& cb : config_.callbacks) cb->on_epoch_end(epoch, logs);
}

History FitLoop::end_training() {
  runtime_.residence()->to_host();  // fit leaves the trained values in the host variables
  for (auto& cb : config_.callbacks) cb->on_train_end({});
  history_.compile_seconds = runtime_.compile_seconds();
  history_.samples = samples_;
  history_.images_per_second =
      history_.train_seconds > 0 ? double(samples_) / history_.train_seconds : 0;
  history_.input_wait_fraction =
      history_.train_seconds > 0 ? history_.input_wait_seconds / history_.train_seconds : 0;
  return std::move(history_);
}

}  // namespace lockstep
