// In-process replicas of one training step trading small per-channel sums: what a
// synchronized batch_norm_train (and its gradient) needs from the other replicas of its group,
// without a round trip through a communication thread.
//
//   ReplicaExchange* x = ReplicaExchange::find(group);     // in a kernel, every run
//   const double* const* all = x->gather(replica, mine, n); // blocks until every replica gave
//   ... read all[0..replicas()) (each n values, in replica order) ...
//
// Every replica of the group must call gather() with the same n, once per synchronized node, in
// the same order (the programs are the same graph). The result stays valid until this
// replica's next gather(): the slots are double-buffered, and no replica can publish twice more
// before every other has arrived at the gather in between. A replica that fails makes the
// others' gather() throw instead of waiting forever. The group ids are the strategy's
// GradientReducer groups (src/distribute), which own the exchanges and register them here; the
// graph module only knows the interface, so backends can reach it.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lockstep {

/// What the in-process replicas of one step trade inside it: small f64 vectors, gathered in
/// replica order (see the comment at the top of this header). Implemented by the strategies'
/// gradient reducers; found by group id.
class ReplicaExchange {
 public:
  virtual ~ReplicaExchange() = default;
  /// Replicas in the group (>= 1).
  virtual int replicas() const = 0;
  /// This replica's share of the global loss (its rows / all rows, for the step being run): a
  /// gradient's cross-replica sums weight each replica's local gradient by it.
  virtual float weight(int replica) const = 0;
  /// Publishes `n` doubles of `replica` and returns every replica's, in replica order, once all
  /// have published. Valid until this replica's next gather().
  virtual const double* const* gather(int replica, const double* mine, size_t n) = 0;

  /// The exchange registered for `group`, or an error naming it.
  static ReplicaExchange* find(int64_t group);
  /// Registers (`x` non-null) or removes (`x` null) the exchange of `group`.
  static void set(int64_t group, ReplicaExchange* x);
};

}  // namespace lockstep
