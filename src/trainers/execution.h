// One execution of evaluate or predict: up to CompileConfig::steps_per_execution batches
// staged across the local replicas' programs and run back to back (fit's own loop is FitLoop,
// fit_loop.h).
#pragma once
#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/trainers/model.h"
#include "trainers/fit_loop.h"
#include "trainers/fit_source.h"
#include "trainers/program.h"

namespace lockstep {

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
      source.copy_to_slot(first_row + begin, first_row + end, p, slot);
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
};

}  // namespace lockstep
