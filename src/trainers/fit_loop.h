// Model::fit's host loop (internal to train): the epochs of one fit() call, in four named parts
//   step planning    — where training starts (initial_epoch, or a BackupAndRestore resume
//                      point), how many steps an epoch has, and the check that the workers
//                      agree on it;
//   replica dispatch — one execution (steps_per_execution steps): for each step, this
//                      worker's share of the next batch (agreed with the other workers), a
//                      tail batch too small to split dropped, the share staged in each local
//                      replica's program; then the replicas run the staged steps together, back
//                      to back inside their programs;
//   stop handling    — a NaN/inf loss (any replica of any worker), Model::stop_training, or a
//                      preemption signal (lockstep/trainers/preemption.h);
//   epoch logging    — metrics, the progress bar, validation, History and the callbacks.
// Also the helpers the evaluate and predict loops (evaluate_predict.cpp) share with it.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/trainers/model.h"
#include "lockstep/trainers/progress.h"
#include "trainers/fit_source.h"
#include "trainers/model_runtime.h"
#include "trainers/program.h"

namespace lockstep {

// Rows [begin, end) of part `part` when `rows` rows are split over `parts` parts (replicas or
// workers); the first rows % parts parts get one row more.
std::pair<int64_t, int64_t> replica_rows(int64_t rows, int parts, int part);

// Resets the metrics of every local replica (the copies are folded into replica 0's first,
// which zeroes them). replication may be nullptr.
void reset_metrics(const Model& model, Replication* replication);

// Metric values: local replicas folded into replica 0's accumulators, then (across_workers)
// summed over workers (sum(total) / sum(count)). Every worker must make the same call.
Logs read_metrics(const Model& model, Replication* replication, const std::string& prefix = "",
                  bool across_workers = true);

class FitLoop {
 public:
  // runtime: the model's compiled state (its programs, replication, progress). config.verbose
  // is cleared on workers other than the chief (only the chief prints).
  FitLoop(Model& model, ModelRuntime& runtime, Model::Source& source, FitConfig& config);
  History run();

 private:
  using Clock = std::chrono::steady_clock;

  // This worker's share of one global batch: rows [first_row, first_row + rows) of the
  // source's current batch.
  struct WorkerBatch {
    bool available = false;  // false: some worker's data ended (the epoch ends on every one)
    int64_t first_row = 0;
    int64_t rows = 0;
    int64_t global_rows = 0;  // over all workers: each replica's gradient weight is its share
    bool too_small = false;   // fewer rows than local replicas somewhere: dropped by every one
  };

  // Step planning.
  struct StartPoint {
    int epoch = 0;
    int64_t step = 0;  // within that epoch
  };
  StartPoint begin_training();
  int64_t plan_epoch(int epoch, int64_t first_step, bool first_epoch);  // -1: until data ends
  void skip_to_step(int epoch, int64_t step);
  void check_workers_agree_on_steps(int64_t steps_this_worker);

  // One epoch: runs its steps in executions of steps_per_execution steps.
  void run_epoch(int epoch, int64_t first_step, bool first_epoch);
  Logs run_steps(int epoch, int64_t first_step, int64_t steps, ProgressBar& bar);
  // Steps [first_step, end_step): stages their batches, then runs them inside the programs
  // with no host work between them; returns the step after the last one that ran or was
  // dropped (first_step: none, the data ended).
  int64_t run_execution(int epoch, int64_t first_step, int64_t end_step, bool& end_of_data);

  // Replica dispatch. An execution's staged steps form runs: consecutive steps on the same
  // per-replica programs with the same gradient weights (a tail batch of another size starts
  // a run of its own), each run one call into every replica's program.
  struct Run {
    int64_t first_step = 0;  // steps [first_step, first_step + steps)
    int steps = 0;
    int64_t rows = 0;                 // this worker's rows per step
    std::vector<Program*> programs;   // per local replica
    std::vector<int> first_slots;     // per local replica: the program's slot of the first step
                                      // (-1: one step written into its inputs directly)
    std::vector<float> weights;       // per local replica: its share of the global batch
    std::vector<int64_t> first_rows;  // per local replica: StepInfo::first_row
    bool alone = false;               // stage_alone: one program, replica 0's variables
  };
  int64_t stage_execution(int64_t first_step, int64_t end_step, bool& end_of_data);
  WorkerBatch next_batch();
  void agree_with_other_workers(WorkerBatch& batch);
  void warn_dropped_batch(int64_t rows);
  void stage_batch(const WorkerBatch& batch, int64_t step);
  int take_slot(Program* program);
  Program& train_program(int64_t rows, int replica);
  int run_replicas(const Run& run);  // returns the steps run (fewer: stopped on a NaN loss)
  void stage_alone(const WorkerBatch& batch, int64_t step);
  int run_alone(const Run& run);
  uint64_t first_step_id(const Run& run) const;
  std::vector<VariablePtr> weights_and_optimizer_state() const;
  void sync_replicas_from_chief();

  // Stop handling: true (and the History says why) when the step's loss was NaN or inf.
  bool stop_on_nonfinite_loss(int epoch, int64_t step);
  // After an execution: a SIGTERM or SIGINT (lockstep/trainers/preemption.h) on any worker runs
  // the callbacks' on_train_preempted and throws TrainingPreempted.
  void stop_if_preempted(int epoch, int64_t steps_done);

  // Epoch logging.
  void average_replica_statistics();
  void end_epoch(int epoch, Logs& logs, double epoch_seconds, ProgressBar& bar);
  void add_validation_logs(Logs& logs);
  void record_epoch(int epoch, Logs& logs, double epoch_seconds);
  History end_training();

  Replication* replication() const;

  // Gradient shards (lockstep/core/config.h): checks the count against the replicas, and sets
  // the model up for it (a replication of its own when it has no strategy).
  void prepare_shards();
  // Program p's rows of the worker's batch, relative to its first row (p: the
  // GradientReducer's program index; the local replica without shards).
  std::pair<int64_t, int64_t> program_rows(const WorkerBatch& batch, int p) const;
  void run_shards(const Run& run, int replica, uint64_t step_id);

  Model& model_;
  ModelRuntime& runtime_;
  Model::Source& source_;
  FitConfig& config_;
  const int local_replicas_;
  distribute::StrategyImpl* const strategy_;  // nullptr: not replicated
  const int workers_;
  const bool thread_replicas_;  // strategy_ is the model's thread replicas (not a user's)
  const bool chief_;
  const bool from_arrays_;  // arrays: every worker holds the same data and takes its rows
  int shards_ = 0;          // gradient shards of the global batch (0: the mode's off)
  int shards_per_replica_ = 1;
  int programs_ = 1;  // train programs per step on this worker: local replicas x shards each

  History history_;
  bool replicas_need_sync_ = true;
  bool warned_dropped_batch_ = false;
  int64_t samples_ = 0;
  double input_wait_seconds_ = 0;           // this epoch's
  std::vector<Program*> replica_programs_;  // the current batch's, then the current run's
  std::vector<float> replica_weights_;
  std::vector<int64_t> replica_first_rows_;
  std::vector<int> replica_steps_;
  std::vector<Run> runs_;  // this execution's: runs_[0, num_runs_)
  size_t num_runs_ = 0;
  std::vector<std::pair<Program*, int>> slots_used_;  // this execution's staged slots per program
};

}  // namespace lockstep
