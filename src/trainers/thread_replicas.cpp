// When fit() runs its train step as thread replicas (trainers/thread_replicas.h).
#include "trainers/thread_replicas.h"

#include <omp.h>

#include <algorithm>

#include "lockstep/core/config.h"
#include "lockstep/graph/backend.h"
#include "lockstep/nn/network.h"

namespace lockstep {

namespace {

// The elements a row writes through the model's layers (every layer call's outputs, nested
// models' layers counted one by one): what a replica keeps in its own caches.
double activations_per_row(const Network& network) {
  double n = 0;
  for (const auto& call : network.calls()) {
    if (const Network* nested = nested_network(*call->layer)) {
      n += activations_per_row(*nested);
      continue;
    }
    for (const TensorType& t : call->outputs) {
      double row = 1;
      for (int d = 1; d < t.shape.rank(); ++d) row *= double(std::max<int64_t>(t.shape[d], 1));
      n += row;
    }
  }
  return n;
}

}  // namespace

int fit_thread_replicas(const Model& model, const ResolvedCompile& resolved, bool has_strategy,
                        int64_t batch_rows) {
  const int setting = config::thread_replicas();
  if (setting == 1) return 1;
  const int replicas = setting == config::kAutoThreadReplicas ? omp_get_max_threads() : setting;
  const CompileConfig& cfg = resolved.config;
  if (has_strategy || config::op_determinism_enabled() ||
      !find_backend(cfg.backend).splits_batch_over_host_threads() || cfg.run_eagerly ||
      replicas < 2 || omp_in_parallel())
    return 1;
  const int64_t rows = (batch_rows >= 0 ? batch_rows : kAssumedBatchRows) / replicas;
  if (rows < kMinThreadReplicaRows) return 1;
  double params = 0;
  for (const VariablePtr& v : model.trainable_weights()) params += double(v->value.numel());
  return activations_per_row(model) * double(rows) >= kActivationsPerParameter * params ? replicas
                                                                                        : 1;
}

}  // namespace lockstep
