// Program: one compiled step of a model (train, eval or predict) for one batch size and one
// replica. It builds the step graph (forward, loss, autodiff, gradient all-reduce when the
// model is replicated, optimizer update, metric updates) and compiles it into an Executable.
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/graph/executable.h"
#include "lockstep/trainers/model.h"
#include "trainers/compile_resolution.h"
#include "trainers/replication.h"

namespace lockstep {

class Program {
 public:
  enum class Kind { train, eval, predict };
  // The step of `network` for `batch` rows, with the losses, loss weights and metrics of
  // `resolved` (what compile() made of the configuration; a default one for an uncompiled
  // model's predict step). replication == nullptr (or replica 0 of one local replica and one
  // worker): the plain single-device step.
  // weighted (train/eval): an input after the targets takes the batch's sample weights:
  // [batch] (weighted 1: every output's loss and weighted_metrics use them) or [batch, outputs]
  // (weighted = outputs > 1: column o weighs output o's loss and weighted_metrics).
  Program(const Network& network, const ResolvedCompile& resolved, Kind kind, int64_t batch,
          Replication* replication = nullptr, int replica = 0, int weighted = 0);
  // A step of a compiled model built directly (tests): its compile_config() resolved again,
  // with `loss_tracker`, `metrics` and `weighted_metrics` (each watching the first output).
  Program(const Model& model, Kind kind, int64_t batch, MetricPtr loss_tracker,
          const std::vector<MetricPtr>& metrics,
          const std::vector<MetricPtr>& weighted_metrics = {}, Replication* replication = nullptr,
          int replica = 0, int weighted = 0);
  // The step's inputs: the model inputs x(0..inputs-1), then (train/eval) the targets
  // y(0..outputs-1), one per model output, then (weighted) the sample weights.
  int inputs() const { return inputs_; }
  int targets() const { return targets_; }
  Tensor& x(int i = 0) { return tile_ ? full_in_[size_t(i)] : exe_->input(i); }
  Tensor& y(int i = 0) { return exe_->input(inputs_ + i); }
  // The sample-weight input (weighted programs), else nullptr.
  Tensor* sample_weight() { return weighted_ ? &exe_->input(inputs_ + targets_) : nullptr; }
  bool weighted() const { return weighted_; }
  int weight_columns() const { return weight_columns_; }  // Model::program's `weighted`
  void run() {
    if (tile_)
      run_tiles(full_in_, full_out_);
    else
      exe_->run();
  }
  void set_step(uint64_t step) {
    exe_->set_step(step);
    if (tail_) tail_->set_step(step);
    for (auto& e : thread_exes_) e->set_step(step);
  }
  void set_first_row(int64_t row) {  // see StepInfo::first_row
    exe_->set_first_row(row);
    if (unrolled_) unrolled_->set_first_row(row);
    if (tail_) tail_->set_first_row(row);
    for (auto& e : thread_exes_) e->set_first_row(row);
  }
  // Multi-step execution (CompileConfig::steps_per_execution): the fit loop stages the batches
  // of an execution in slots (host buffers shaped like the step's inputs, allocated here once
  // and kept), then runs them back to back with run_steps. stage(n) makes at least n slots.
  void stage(int slots);
  int staged_slots() const { return int(staged_.size()); }
  // Slot `slot`'s buffer for step input j (the order of x(i), y(i), sample_weight()).
  Tensor& staged_input(int slot, int j);
  Tensor& staged_x(int slot, int i = 0) { return staged_input(slot, i); }
  Tensor& staged_y(int slot, int i = 0) { return staged_input(slot, inputs_ + i); }
  Tensor* staged_sample_weight(int slot) {
    return weighted_ ? &staged_input(slot, inputs_ + targets_) : nullptr;
  }
  // Runs slots [first_slot, first_slot + n) as n steps with step ids first_step + k: each copies
  // its slot into the step's inputs and runs the static program, with no return to the caller,
  // no callback and no allocation in between. A train run stops after a step whose loss was
  // NaN or inf on any replica (nonfinite_replicas() > 0), as fit stops there. first_slot <
  // 0 (n == 1): the one step whose inputs were written into x()/y() directly. Returns the steps
  // run.
  int run_steps(int first_slot, int n, uint64_t first_step);
  // A predict program's predictions of output o from the staged step in slot `slot` (run_steps
  // copies each staged step's outputs out, as the next step overwrites them).
  const Tensor& staged_prediction(int slot, int o) const;
  uint64_t step() const { return exe_->step(); }  // the next run()'s step id
  float loss() const { return out(0).item(); }
  // After a train step: how many replicas of the whole job had a NaN or inf loss (replicated
  // programs learn it from the gradient all-reduce; otherwise this replica's loss decides).
  int nonfinite_replicas() const {
    return has_nonfinite_ ? int(out(1 + outputs_).item()) : (std::isfinite(loss()) ? 0 : 1);
  }
  // Model output i's predictions (outputs() of them).
  int outputs() const { return outputs_; }
  const Tensor& predictions(int i = 0) const {
    if (tile_) return full_out_[size_t(i)];
    return out(kind_ == Kind::predict ? i : 1 + i);
  }
  double compile_seconds() const {
    double s = exe_->compile_seconds() + (tail_ ? tail_->compile_seconds() : 0.0) +
               (unrolled_ ? unrolled_->compile_seconds() : 0.0);
    for (const auto& e : thread_exes_) s += e->compile_seconds();
    return s;
  }
  // steps_per_execution = N on a backend that runs several steps per call (xla): run_steps runs
  // each N staged steps as one call of an N-step program (0: none).
  int unrolled_steps() const { return unrolled_steps_; }
  // A predict program that runs its batch in tiles of this many rows (trainers/predict_tiles.h;
  // executable() is then the tile's program), else 0.
  int64_t tile_rows() const { return tile_; }
  // Threads whose tiles run at once, each on its own program (predict_thread_tiles), else 1.
  int tile_threads() const { return 1 + int(thread_exes_.size()); }
  const Executable& executable() const { return *exe_; }
  int64_t batch() const { return batch_; }
  // Device replicas the program runs as (XlaStrategy; lockstep/graph/device_system.h): its
  // graph is one replica's step on batch() / device_replicas() rows, and the backend splits the
  // batch written into x()/y() among them. 1 otherwise.
  int device_replicas() const { return device_replicas_; }

 private:
  struct Built {
    Graph g;
    std::vector<Value> inputs, outputs;
  };
  Built build(const Network& network, const ResolvedCompile& resolved, int64_t batch,
              Replication* replication, int replica);
  // team > 0: the OpenMP threads the kernels plan for (else the replica's, or the process's).
  std::unique_ptr<Executable> compile(const CompileConfig& config, Built& built,
                                      Replication* replication, int replica, int steps = 1,
                                      int team = 0);
  int run_unrolled(int first_slot, int n, uint64_t first_step);
  // Step output i of the last run (the unrolled program's last step when that ran).
  const Tensor& out(int i) const {
    return ran_unrolled_ ? unrolled_->output((unrolled_steps_ - 1) * exe_->num_outputs() + i)
                         : exe_->output(i);
  }
  int64_t plan_predict_tiles(const Network& model, const ResolvedCompile& resolved, Built& full,
                             Replication* replication, int replica);
  static void run_rows(Executable& e, const std::vector<Tensor>& in, std::vector<Tensor>& out,
                       int64_t r, int64_t end);
  void run_tiles(const std::vector<Tensor>& in, std::vector<Tensor>& out);
  void run_thread_tiles(const std::vector<Tensor>& in, std::vector<Tensor>& out);
  void hold_on_device(const Network& network, const ResolvedCompile& resolved);
  std::vector<Value> add_loss_and_updates(const Network& network, const ResolvedCompile& resolved,
                                          Graph& g, const std::vector<Value>& preds,
                                          std::vector<Value>& inputs,
                                          const std::vector<Value>& layer_losses,
                                          const std::vector<Value>& output_masks,
                                          Replication* replication, int replica);

  Kind kind_;
  int64_t batch_;
  int device_replicas_ = 1;
  int64_t rows_ = 0;  // the graph's batch rows: batch_ / device_replicas_
  bool weighted_ = false;
  int weight_columns_ = 0;  // of the sample-weight input ([batch] when 1)
  bool partial_ = false;    // a gradient shard's program: no all-reduce wait, no update
  bool has_nonfinite_ = false;
  int inputs_ = 1, targets_ = 0, outputs_ = 1;
  std::unique_ptr<Executable> exe_;
  std::shared_ptr<DeviceResidence> residence_;  // compile() passes it to the backend
  std::unique_ptr<Executable> unrolled_;        // unrolled_steps() steps per run
  int unrolled_steps_ = 0;
  bool ran_unrolled_ = false;
  // Predict in tiles: exe_ runs tile_ rows, tail_ the batch's last batch % tile_ rows; the
  // step's inputs and predictions are full_in_ / full_out_ (batch rows).
  int64_t tile_ = 0;
  std::unique_ptr<Executable> tail_;
  std::vector<Tensor> full_in_, full_out_;
  // Thread tiles (predict_thread_tiles): tile t of the batch runs on OpenMP thread t, exe_ for
  // t = 0 and thread_exes_[t - 1] for the others, each compiled for one thread.
  std::vector<std::unique_ptr<Executable>> thread_exes_;
  std::vector<std::string> thread_errors_;        // per thread: what its tile threw, else empty
  std::vector<std::vector<Tensor>> staged_;       // [slot][step input]
  std::vector<std::vector<Tensor>> staged_outs_;  // predict: [slot][output]
};

}  // namespace lockstep
