// Where a model's weights are newest when a backend keeps them on its device between steps
// (the xla backend: weights and optimizer slots in PJRT device buffers, donated and updated in
// place). One DeviceResidence is shared by every program of one model; the host code that
// reads or writes the variables' host values (Variable::value) says so first:
//
//   residence->to_host();       // before a host read: the newest device values come back
//   residence->host_changed();  // before a host write (set_weights, load_weights): afterwards
//                               // every program uploads the host values at its next run
//
// A backend that keeps a held variable on its device asks before_run() whether its device
// copies are current (else it uploads them), and after a run that updated them calls
// after_run() with a function that copies them to the host; from then on the host values are
// stale until to_host(). Variables not held (metric accumulators, the optimizer's iteration
// count and learning rate, a replica's copies) the backend keeps in sync with the host every
// step. Kernel backends run on the host values themselves; their programs use it to know when
// what they compute from weights alone is stale (the weight cache: a kernel program that writes
// a held variable calls after_run() with a no-op download, one that caches asks before_run()).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep {

/// Where a model's weights are newest when a backend keeps them on its device between steps (see
/// the comment at the top of this header): the host calls to_host() / host_changed() around its
/// reads and writes, the backend before_run() / after_run() around its runs.
class DeviceResidence {
 public:
  /// The variables that may stay on a device between steps (a model's weights and optimizer
  /// slots); adding again is harmless.
  void add(const std::vector<VariablePtr>& variables);
  bool holds(const Variable* variable) const;  ///< Whether add() was given `variable`.

  /// Host side: the newest device values into Variable::value (a no-op when the host's are the
  /// newest). The device copies stay current.
  void to_host();
  /// Host side: to_host(), then every device copy is stale (the host is about to write).
  void host_changed();
  /// Device -> host copies of held variables so far (to_host() calls that found newer device
  /// values), for tests and reports.
  int64_t downloads() const;

  /// Backend side, for `program` (any stable address, e.g. the compiled graph): before a run,
  /// whether its device copies of the held variables are stale and must be uploaded now (the
  /// newest values of another program come to the host first). Counts them current afterwards.
  bool before_run(const void* program);
  /// After a run that updated held variables: program's device copies are the newest;
  /// `download` copies them into Variable::value (to_host() calls it).
  void after_run(const void* program, std::function<void()> download);
  /// The program is going away: its newer values to the host first.
  void forget(const void* program);

 private:
  void download_locked();
  mutable std::mutex mutex_;
  std::set<const Variable*> variables_;
  uint64_t version_ = 1;                    ///< of the newest values
  std::map<const void*, uint64_t> loaded_;  ///< each program's device copies' version
  const void* newest_ = nullptr;            ///< the program holding values newer than the host's
  std::function<void()> download_;          ///< newest_'s copy to the host
  int64_t downloads_ = 0;
};

}  // namespace lockstep
