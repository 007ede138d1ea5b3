// Replication: the replicas of one model under a strategy (or its thread replicas): replica
// 0's variables and the copies the other local replicas' programs read, the gradient reducer,
// and the syncs between them. Programs are built for one replica of a Replication (program.h).
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "lockstep/graph/graph.h"

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
  // threads: the thread replicas of a model without a strategy (ModelRuntime::set_thread_replicas):
  // every BatchNormalization pools its statistics over them, as over one batch.
  explicit Replication(std::shared_ptr<distribute::StrategyImpl> strategy, bool threads = false);
  ~Replication();
  bool threads() const { return threads_; }
  distribute::StrategyImpl& strategy() const { return *strategy_; }
  int local_replicas() const;
  // Gradient shards per local replica (lockstep/core/config.h; 1: none). With k > 1, train
  // programs local_replicas + r * (k - 1) + j compute shard j < k - 1 of replica r (the
  // GradientReducer's program index): they read replica r's trainable variables and have
  // their own copies of the others (BatchNormalization's statistics, metric accumulators).
  int shards_per_replica() const;
  void set_shards_per_replica(int k);
  // Whether train programs carry the gradient all-reduce (replicated, or sharded).
  bool reduces() const;
  // The local replica whose shard program `program` is (program itself below local_replicas).
  int owner(int program) const;
  // Program `replica`'s copy of v (v itself for 0); copies are made on first use.
  VariablePtr variable(const VariablePtr& v, int replica);
  // Copies replica 0's values into every copy (after set_weights, loading a checkpoint, or a
  // broadcast from the chief); with `only`, into the copies of those variables alone.
  void sync_from_primary();
  void sync_from_primary(const std::vector<VariablePtr>& only);
  // Adds the copies' accumulator values into replica 0's and zeroes the copies.
  void fold_into_primary(const std::vector<VariablePtr>& accumulators);
  // Replaces each variable by the mean over local replicas and workers (BatchNormalization's
  // moving statistics, which every replica updates from its own batch).
  void average(const std::vector<VariablePtr>& variables);
  distribute::GradientReducer& reducer() { return *reducer_; }

 private:
  std::shared_ptr<distribute::StrategyImpl> strategy_;
  bool threads_ = false;
  std::map<Variable*, std::vector<VariablePtr>> copies_;  // [replica - 1]
  std::unique_ptr<distribute::GradientReducer> reducer_;
};

}  // namespace lockstep
