// Distribution strategies (tf.distribute): synchronous data parallelism. A model created (or
// compiled) inside `strategy.scope()` is replicated: fit() compiles one program per replica,
// splits every global batch across the replicas, all-reduces the gradients inside the
// compiled step (bucketed, overlapping backward) and applies the same update on every replica.
//
//   OneDeviceStrategy            one replica, no communication (the default).
//   MirroredStrategy(devices)    one replica per local device; on a CPU host a device "cpu:K"
//                                is a disjoint group of cores: each replica runs in its own
//                                thread with its share of the OpenMP threads; gradients are
//                                summed in process.
//   MultiWorkerMirroredStrategy  one or more replicas per process, processes on one or many
//                                hosts (cluster from TF_CONFIG, mpirun or srun); gradients are
//                                all-reduced by Gloo over TCP or by OpenMPI.
//
// Semantics: the global batch is split across replicas (fit: remainder rows go to the first
// replicas; distribute_dataset: the global batch must divide); the gradient is the
// sample-weighted mean over all replicas, so N replicas x B/N matches 1 replica x B; loss and
// metrics are reduced as sum(total)/sum(count); only the chief (worker 0) writes checkpoints
// and prints progress.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/core/tensor.h"
#include "lockstep/data/dataset.h"
#include "lockstep/distribute/cluster.h"
#include "lockstep/distribute/collective.h"

namespace lockstep::distribute {

class StrategyImpl;  ///< internal (src/distribute/internal/strategy_runtime.h)

/// How distribute_dataset shards a dataset across workers (tf.data.experimental.AutoShardPolicy).
///   AUTO: FILE when the dataset reads files, else DATA. FILE: a shard goes right after the
///   file source (Dataset::shard_files), so each worker opens and decodes only its share of the
///   files (an error without a file source). DATA: each worker reads everything and keeps every
///   W-th element of the unbatched stream. OFF: every worker sees the whole dataset.
enum class AutoShardPolicy { AUTO, FILE, DATA, OFF };

/// How Strategy::reduce combines values: their sum, or their mean over replicas in sync.
enum class ReduceOp { SUM, MEAN };

/// What distribute_datasets_from_function hands the user's function (tf.distribute.InputContext).
struct InputContext {
  int num_input_pipelines = 1;   ///< = number of workers
  int input_pipeline_id = 0;     ///< = this worker's index
  int num_replicas_in_sync = 1;  ///< replicas on all workers
  /// Global batch / replicas; throws when it does not divide.
  int64_t get_per_replica_batch_size(int64_t global_batch_size) const;
};

/// Options of every strategy: gradient buckets, communication, threads, replicas per worker.
struct StrategyOptions {
  /// Gradients are packed into buckets of at least this many bytes, in the order backward
  /// produces them; each bucket is all-reduced as soon as its last gradient is computed, on a
  /// communication thread, while backward goes on. 0 = one pack for all gradients (Keras's
  /// CommunicationOptions.bytes_per_pack default), i.e. no overlap. Default 4 MiB: the reference
  /// CNN's big dense kernel closes the first bucket and is reduced during the conv backward.
  int64_t bytes_per_pack = 4 << 20;
  CommunicationOptions communication;  ///< timeout, Gloo algorithm / MPI
  /// OpenMP threads per replica thread (0 = the process's threads / local replicas, >= 1).
  int threads_per_replica = 0;
  /// Pin each replica thread (and the OpenMP team it starts) to its device's cores.
  bool pin_threads = false;
  /// Local replicas per worker for MultiWorkerMirroredStrategy.
  int replicas_per_worker = 1;
  /// The gradient all-reduce across workers (PyTorch DDP's bf16_compress_hook, with f32 sums):
  /// DType::f32 (default), or DType::bf16: each worker's gradient buckets travel as bfloat16,
  /// half the bytes, and are added in float32 (Communicator::allreduce_sum_bf16: the reduced
  /// gradient is the bf16 rounding of the f32 sum of bf16-rounded contributions: off by at
  /// most 2^-8 of the contributions' magnitudes). Only the gradient buckets: loss/metric totals and
  /// synchronized BatchNormalization's statistics stay f32, and so does the in-process sum of local
  /// replicas (shared memory: there is no wire to halve). No effect with one worker.
  DType all_reduce_dtype = DType::f32;
};

/// A value per local replica (what run() returns and reduce() takes).
using PerReplica = std::vector<Tensor>;

/// Handed to run()'s function on each replica's thread.
struct ReplicaContext {
  int replica_id_in_sync_group = 0;  ///< global replica id: worker * local replicas + local id
  int local_replica_id = 0;          ///< this replica's index in its process
  int num_replicas_in_sync = 1;      ///< replicas on all workers
  StrategyImpl* strategy = nullptr;  ///< the strategy running it (internal)
  /// Sums `value` (f32, any shape) in place across every replica of every worker; every replica
  /// must call it with the same shape.
  void all_reduce_sum(Tensor& value) const;
};

/// Global batches from a dataset, sharded for this worker; fit() splits each across the local
/// replicas. iterate per_replica() for custom loops.
class DistributedDataset {
 public:
  DistributedDataset() = default;  ///< none
  /// `dataset`'s batches for `local_replicas` replicas (global batches unless per replica).
  DistributedDataset(data::Dataset dataset, int local_replicas, bool batch_is_per_replica)
      : dataset_(std::move(dataset)),
        local_replicas_(local_replicas),
        per_replica_(batch_is_per_replica) {}
  /// This worker's dataset of batches (global batches, or per-replica ones when made by
  /// distribute_datasets_from_function).
  const data::Dataset& dataset() const { return dataset_; }
  int local_replicas() const { return local_replicas_; }  ///< replicas in this process
  /// Whether each element is one replica's batch (distribute_datasets_from_function).
  bool batch_is_per_replica() const { return per_replica_; }
  /// Splits one element of dataset() into one element per local replica (distribute_dataset),
  /// or collects local_replicas() consecutive elements (distribute_datasets_from_function).
  /// Returns false at the end of the data.
  bool next_per_replica(data::Iterator& it, std::vector<data::Element>& out) const;

 private:
  data::Dataset dataset_;
  int local_replicas_ = 1;
  bool per_replica_ = false;
};

/// A distribution strategy (tf.distribute.Strategy): which replicas train in sync, and how
/// they communicate. Make one with OneDeviceStrategy, MirroredStrategy,
/// MultiWorkerMirroredStrategy or strategy_from_name; build and compile models in scope().
class Strategy {
 public:
  /// RAII: models and optimizers created, and models compiled, while a Scope is alive are
  /// replicated by its strategy. Scopes nest; the innermost wins.
  class Scope {
   public:
    /// Enters strategy `s`'s scope (until destroyed).
    explicit Scope(std::shared_ptr<StrategyImpl> s);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::shared_ptr<StrategyImpl> previous_;
  };

  Strategy() = default;  ///< no strategy: the plain single-device loop (impl() is null)
  /// Wraps a strategy's implementation (the factory functions below make these).
  explicit Strategy(std::shared_ptr<StrategyImpl> impl) : impl_(std::move(impl)) {}
  /// `auto scope = strategy.scope();` is Keras's `with strategy.scope():`.
  [[nodiscard]] Scope scope() const { return Scope(impl_); }

  std::string name() const;          ///< "OneDeviceStrategy", "MirroredStrategy", ...
  int num_replicas_in_sync() const;  ///< replicas on all workers (the global batch's split)
  int num_local_replicas() const;    ///< replicas in this process
  int num_workers() const;           ///< processes (1 unless multi-worker)
  int worker_index() const;          ///< this process's index (0: the chief)
  bool is_chief() const;             ///< worker 0: the one that prints and writes
  const std::vector<std::string>& devices() const;  ///< the local replicas' devices ("cpu:0", ...)

  /// Runs fn once per local replica, each on its replica's thread; returns the values.
  PerReplica run(const std::function<Tensor(const ReplicaContext&)>& fn) const;
  /// Reduces per-replica values across local replicas and all workers (same shapes). MEAN
  /// divides by num_replicas_in_sync.
  Tensor reduce(ReduceOp op, const PerReplica& value) const;

  /// Shards `dataset` (yielding global batches) across workers with `policy` and checks that
  /// the batch divides by the replica count when elements are seen.
  DistributedDataset distribute_dataset(const data::Dataset& dataset,
                                        AutoShardPolicy policy = AutoShardPolicy::AUTO) const;
  /// Calls fn once per worker (input pipeline) with its InputContext; fn returns a dataset of
  /// per-replica batches (use ctx.get_per_replica_batch_size and shard with ctx).
  DistributedDataset distribute_datasets_from_function(
      const std::function<data::Dataset(const InputContext&)>& fn) const;

  /// The implementation (nullptr for Strategy()): what Scope and the models take.
  const std::shared_ptr<StrategyImpl>& impl() const { return impl_; }
  /// The strategy of the innermost live scope, or nullptr outside every scope.
  static std::shared_ptr<StrategyImpl> current();

 private:
  std::shared_ptr<StrategyImpl> impl_;
};

/// device: "cpu:0" (the only device kind of this build).
Strategy OneDeviceStrategy(const std::string& device = "cpu:0", StrategyOptions options = {});
/// devices: {"cpu:0", "cpu:1", ...}; empty = one replica per hardware thread ("cpu:0".."cpu:K-1"
/// with K = max(1, std::thread::hardware_concurrency())). Each replica runs an OpenMP team of
/// threads_per_replica threads (default: the process's threads / replicas, at least 1); with
/// pin_threads, device k is pinned to its own disjoint group of hardware threads.
Strategy MirroredStrategy(std::vector<std::string> devices = {}, StrategyOptions options = {});
/// Connects to the cluster (blocks until every worker arrived or options.communication.timeout).
Strategy MultiWorkerMirroredStrategy(
    const ClusterResolver& resolver = ClusterResolver::from_environment(),
    StrategyOptions options = {});
/// The examples' --strategy flag: "one_device" (cpu:0), "mirrored" (one replica per hardware
/// thread) or "multi_worker" (cluster from TF_CONFIG, or the MPI / Slurm environment); "" = no
/// strategy (an empty Strategy: the plain single-device loop). Anything else throws, naming the
/// choices.
Strategy strategy_from_name(const std::string& name, StrategyOptions options = {});

}  // namespace lockstep::distribute
