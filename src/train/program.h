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
#include "lockstep/train/model.h"

namespace lockstep {

namespace distribute {
class StrategyImpl;
class GradientReducer;
}  // namespace distribute

// The replicas of one model under a strategy: replica 0 uses the model's own variables
// (weights, optimizer slots, metric accumulators); replicas 1..R-1 of this process get copies,
// created when a program first reads a variable. Every replica applies the same all-reduced
// update, so the copies stay equal to replica 0's; metric accumulators are folded into
// replica 0's after each step.
class Replication {
 public:
  explicit Replication(std::shared_ptr<distribute::StrategyImpl> strategy);
  ~Replication();
  distribute::StrategyImpl& strategy() const { return *strategy_; }
  int local_replicas() const;
  // Replica `replica`'s copy of v (v itself for replica 0).
  VariablePtr variable(const VariablePtr& v, int replica);
  // Copies replica 0's values into every copy (after set_weights, loading a checkpoint, or a
  // broadcast from the chief).
  void sync_from_primary();
  // Adds the copies' accumulator values into replica 0's and zeroes the copies.
  void fold_into_primary(const std::vector<VariablePtr>& accumulators);
  // Replaces each variable by the mean over local replicas and workers (BatchNormalization's
  // moving statistics, which every replica updates from its own batch).
  void average(const std::vector<VariablePtr>& variables);
  distribute::GradientReducer& reducer() { return *reducer_; }

 private:
  std::shared_ptr<distribute::StrategyImpl> strategy_;
  std::map<Variable*, std::vector<VariablePtr>> copies_;  // [replica - 1]
  std::unique_ptr<distribute::GradientReducer> reducer_;
};

class Program {
 public:
  enum class Kind { train, eval, predict };
  // replication == nullptr (or replica 0 of one local replica and one worker): the plain
  // single-device step.
  // weighted (train/eval): a third input takes the batch's sample weights [batch]; the loss and
  // weighted_metrics use them.
  Program(const Model& model, Kind kind, int64_t batch, MetricPtr loss_tracker,
          const std::vector<MetricPtr>& metrics,
          const std::vector<MetricPtr>& weighted_metrics = {}, Replication* replication = nullptr,
          int replica = 0, bool weighted = false);
  Tensor& x() { return exe_->input(0); }
  Tensor& y() { return exe_->input(1); }
  // The sample-weight input (weighted programs), else nullptr.
  Tensor* sample_weight() { return weighted_ ? &exe_->input(2) : nullptr; }
  bool weighted() const { return weighted_; }
  void run() { exe_->run(); }
  void set_step(uint64_t step) { exe_->set_step(step); }
  float loss() const { return exe_->output(0).item(); }
  // After a train step: how many replicas of the whole job had a NaN or inf loss (replicated
  // programs learn it from the gradient all-reduce; otherwise this replica's loss decides).
  int nonfinite_replicas() const {
    return has_nonfinite_ ? int(exe_->output(2).item()) : (std::isfinite(loss()) ? 0 : 1);
  }
  const Tensor& predictions() const { return exe_->output(kind_ == Kind::predict ? 0 : 1); }
  double compile_seconds() const { return exe_->compile_seconds(); }
  const Executable& executable() const { return *exe_; }
  int64_t batch() const { return batch_; }

 private:
  struct StepMetrics {
    MetricPtr loss_tracker;
    const std::vector<MetricPtr>& metrics;
    const std::vector<MetricPtr>& weighted_metrics;
  };
  std::vector<Value> add_loss_and_updates(const Model& model, Graph& g, Value pred,
                                          std::vector<Value>& inputs, const StepMetrics& metrics,
                                          const std::vector<Value>& layer_losses,
                                          Replication* replication, int replica);

  Kind kind_;
  int64_t batch_;
  bool weighted_ = false;
  bool has_nonfinite_ = false;
  std::unique_ptr<Executable> exe_;
};

Program::Kind program_kind(const std::string& name);

}  // namespace lockstep
