// When fit() runs its train step as thread replicas (train/thread_replicas.h).
#include "train/thread_replicas.h"

#include <omp.h>

#include "lockstep/core/config.h"
#include "lockstep/nn/network.h"

namespace lockstep {

namespace {

// Whether `network` trains a BatchNormalization: a trainable one outside every frozen nested
// model (a frozen one runs in inference mode, with nothing to pool).
bool trains_batch_norm(const Network& network) {
  for (const LayerPtr& layer : network.layers()) {
    if (!layer->trainable) continue;
    if (const Network* nested = nested_network(*layer)) {
      if (trains_batch_norm(*nested)) return true;
    } else if (layer->class_name() == "BatchNormalization") {
      return true;
    }
  }
  return false;
}

}  // namespace

int fit_thread_replicas(const Model& model, const ResolvedCompile& resolved, bool has_strategy,
                        int64_t batch_rows) {
  const int setting = config::thread_replicas();
  if (setting == 1) return 1;
  const int replicas = setting == config::kAutoThreadReplicas ? omp_get_max_threads() : setting;
  const CompileConfig& cfg = resolved.config;
  if (has_strategy || config::op_determinism_enabled() || cfg.backend != "cpu" ||
      cfg.run_eagerly || replicas < 2 || omp_in_parallel() || !trains_batch_norm(model))
    return 1;
  if (batch_rows >= 0 && batch_rows < kMinThreadReplicaRows * replicas) return 1;
  return replicas;
}

}  // namespace lockstep
