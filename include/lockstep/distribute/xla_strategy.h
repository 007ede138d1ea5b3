// Replicas the way TPUStrategy keeps them: one replica per device of one PJRT client (the xla
// backend), the global batch split across them, and the gradient all-reduce inside the compiled
// step (StableHLO all_reduce), so the plugin's own collectives do the work (NCCL on GPUs, the
// interconnect on TPUs, memory on the CPU plugin).
//
//   auto resolver = distribute::XlaClusterResolver::connect("cpu", 2);  // prints the devices
//   distribute::Strategy strategy = distribute::TPUStrategy(resolver);
//   { auto scope = strategy.scope(); model = build(); model.compile(...); }
//   model.fit(x, y, {.batch_size = 64});  // 2 replicas x 32 rows, one program, one call a step
//
// Every program of a model in scope compiles for backend "xla" on the connected devices. On
// one worker XlaStrategy is Keras 3's DataParallel on a one-axis mesh "batch" over the devices
// (lockstep/distribute/distribution.h): one SPMD program on the whole batch, each device fed its
// share of the rows and holding every variable whole, XLA's partitioner inserting the gradient
// all-reduce; so N devices x B/N rows compute what 1 device does with B, and BatchNormalization
// (synchronized or not) normalises with the whole batch's statistics, as under JAX. A training
// batch must divide among the devices (the error says what to do); an evaluate or predict batch
// that does not (a last, partial one) runs with the batch whole on every device.
//
// Across workers (XlaStrategy(resolver, cluster)): every worker process connects to its own
// local devices, and the gradient is the mean over every device of every worker: the devices'
// mean inside the program (there, one replica's step per device: the graph is one replica's
// step; the train step averages the gradients over the replicas, sums the metric totals, and
// averages BatchNormalization's moving statistics, each variable write saying how: op assign /
// assign_add's `aggregation`), then the workers' sum by the cluster's Gloo / MPI communicator
// (MultiWorkerMirroredStrategy's). The xla backend then runs a train step as two executables
// around that host all-reduce (docs/accelerator.md: the forward runs twice a step, and the
// weights go through the host every step). Synchronized BatchNormalization is refused there.
// Strategy::run / reduce (custom loops) run their function once per worker, on the host: the
// device replicas exist only inside compiled programs.
#pragma once
#include <string>
#include <vector>

#include "lockstep/distribute/strategy.h"
#include "lockstep/graph/device_system.h"

namespace lockstep::distribute {

/// The devices of one PJRT plugin, connected for the process
/// (tf.distribute.cluster_resolver.TPUClusterResolver.connect()).
class XlaClusterResolver {
 public:
  /// Loads the PJRT plugin `plugin` (a .so path, or a name found in a Python environment: "cpu"
  /// from xla-cpu-pjrt in .venv-xla, "cuda", "tpu"), initializes it, prints its devices to
  /// stdout when `print`, and returns them. device_count: how many devices to ask for where the
  /// plugin lets one choose (the CPU plugin's cpu_device_count, the CUDA plugin's
  /// visible_devices), 0 for its default; a plugin
  /// with fewer is an error. The process stays connected: connecting again to the same plugin
  /// and count returns the same devices, to another is an error. Throws naming the plugin and
  /// what to do (a missing plugin, a build without the xla backend).
  static XlaClusterResolver connect(const std::string& plugin = "cpu", int device_count = 0,
                                    bool print = true);
  /// The device system connect() found.
  const DeviceSystem& system() const { return system_; }
  /// How many devices (the replicas of an XlaStrategy on them).
  int num_devices() const { return int(system_.devices.size()); }

 private:
  DeviceSystem system_;
};

/// One replica per device of `resolver` (TPUStrategy): num_replicas_in_sync() = its device count.
Strategy XlaStrategy(const XlaClusterResolver& resolver, StrategyOptions options = {});

/// One replica per device of `resolver` on every worker of `cluster` (TF_CONFIG, mpirun or
/// srun: ClusterResolver::from_environment()): each worker process connects to its own devices
/// (the same count on every worker), num_replicas_in_sync() = devices x workers, and the
/// workers' gradients are summed by Gloo over TCP or MPI between the compiled halves of each
/// step. Blocks until every worker arrived (options.communication.timeout).
Strategy XlaStrategy(const XlaClusterResolver& resolver, const ClusterResolver& cluster,
                     StrategyOptions options = {});

/// Keras's name for XlaStrategy.
inline Strategy TPUStrategy(const XlaClusterResolver& resolver, StrategyOptions options = {}) {
  return XlaStrategy(resolver, options);
}

}  // namespace lockstep::distribute
