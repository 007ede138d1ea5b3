// Internal: what a Strategy owns at run time (replica threads, communicators, the
// communication threads), and the GradientReducer that the compiled step's all-reduce ops
// call into.
#pragma once
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lockstep/distribute/strategy.h"
#include "lockstep/graph/graph.h"
#include "lockstep/graph/replica_exchange.h"
#include "lockstep/graph/sharding.h"

namespace lockstep::distribute {

// One persistent thread per local replica; run(fn) runs fn(r) on thread r for every r and
// waits. Thread r sets its OpenMP thread count (its own team) and, when asked, its affinity.
class ReplicaThreads {
 public:
  ReplicaThreads(int replicas, int threads_per_replica, std::vector<std::vector<int>> cores);
  ~ReplicaThreads();
  // Rethrows the first failure after every replica returned; on_error(reason) is called as
  // soon as one fails (so the others stop waiting for it in a collective).
  void run(const std::function<void(int)>& fn,
           const std::function<void(const std::string&)>& on_error);
  int size() const { return int(threads_.size()); }

 private:
  void loop(int r);
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;
  std::function<void(const std::string&)> on_error_;
  int threads_per_replica_;
  std::vector<std::vector<int>> cores_;
};

// The local replicas' exchange of small f64 vectors inside a step (ReplicaExchange::gather,
// for synchronized batch norm): one slot per replica, double-buffered by the gather's parity,
// and a spinning barrier (the replicas are threads of this process, each on its own core when
// there are enough). abort() makes every waiting and later gather throw; the wait also gives
// up after `timeout`, naming the replicas that never arrived.
class LocalExchange {
 public:
  LocalExchange(int replicas, std::chrono::milliseconds timeout);
  const double* const* gather(int replica, const double* mine, size_t n);
  void abort(const std::string& reason);

 private:
  void wait_for_all(uint64_t round);
  int n_;
  std::chrono::milliseconds timeout_;
  std::vector<std::vector<double>> slots_[2];  // [parity][replica]
  std::vector<const double*> views_[2];
  std::vector<uint64_t> rounds_;  // per replica: its gathers so far (its own thread only)
  std::vector<std::atomic<uint64_t>> arrived_;  // per replica: the last round it published
  std::atomic<bool> aborted_{false};
  std::mutex mu_;
  std::string reason_;
};

class StrategyImpl {
 public:
  StrategyImpl(std::string name, std::vector<std::string> devices, StrategyOptions options,
               const ClusterResolver& resolver, bool connect_workers);
  ~StrategyImpl();

  std::string name;
  std::vector<std::string> devices;
  StrategyOptions options;
  ClusterResolver resolver;
  int local_replicas = 1, num_workers = 1, worker_index = 0;
  // OpenMP threads each replica thread runs with (0: replicas run inline on the caller).
  int replica_threads = 0;
  // XlaStrategy (lockstep/distribute/xla_strategy.h): each local replica's program runs as this
  // many replicas, one per device of the connected PJRT client, splitting its batch among them
  // and all-reducing inside the program (lockstep/graph/device_system.h). 1 otherwise.
  int device_replicas = 1;
  // XlaStrategy on one worker: its programs are one SPMD program over its devices, partitioned
  // by this plan (DataParallel on a one-axis mesh "batch", lockstep/distribute/distribution.h),
  // instead of a replica per device; device_replicas still counts the devices (the replicas
  // in sync that batches are split among). nullptr otherwise.
  std::shared_ptr<const ShardingPlan> sharding;
  // The backend the programs of models in this strategy's scope compile for ("": the model's
  // compile() choice). XlaStrategy: "xla".
  std::string backend;
  int replicas_in_sync() const { return local_replicas * device_replicas * num_workers; }
  bool is_chief() const { return worker_index == 0; }
  // Whether gradients cross replicas on the host (local replica threads or workers): train
  // programs then carry the host all-reduce ops (device replicas reduce inside their program).
  bool replicated() const { return local_replicas * num_workers > 1; }

  // Runs fn(r) for every local replica: inline when there is one, else on the replica threads.
  void run_replicas(const std::function<void(int)>& fn);

  // Host-side collectives between steps (no step in flight): sums over workers (not over
  // local replicas), in place. No-ops with one worker.
  void allreduce_workers(double* data, size_t count);
  void broadcast_from_chief(float* data, size_t count);
  // Every worker's `bytes` (sizes may differ), indexed by worker, the same on every worker;
  // {bytes} with one worker.
  std::vector<std::string> allgather_workers(const std::string& bytes);
  void abort(const std::string& reason);

  // All-reduce of one bucket for local replica r (called by the compiled step): sums over
  // local replicas and workers, in place, on replica r's communication thread. A gradient
  // bucket crosses workers in options.all_reduce_dtype; anything else in f32.
  std::future<void> start_allreduce(int replica, float* data, size_t count, bool gradient = false);
  // All-reduce for run()'s ReplicaContext (blocking).
  void allreduce_now(int replica, float* data, size_t count);
  // The local replicas' in-step exchange (synchronized batch norm's sums).
  LocalExchange& exchange() { return *exchange_; }

 private:
  std::unique_ptr<Communicator> global_;                  // across workers (W > 1)
  std::vector<std::unique_ptr<Communicator>> local_;      // in-process group (R > 1)
  std::vector<std::unique_ptr<AsyncCollectives>> async_;  // per local replica
  std::unique_ptr<ReplicaThreads> threads_;
  std::unique_ptr<LocalExchange> exchange_;
  void reduce_bucket(int replica, float* data, size_t count, bool bf16);
};

// The bucket layout of a model's gradients and, per local replica and bucket, the pending
// all-reduce. Programs register it through insert(); the all_reduce_start / all_reduce_wait
// kernels find it by the "group" attribute.
// It is also its group's ReplicaExchange (registered under group()): the weights, and the
// strategy's LocalExchange.
class GradientReducer final : public ReplicaExchange {
 public:
  GradientReducer(StrategyImpl& strategy);
  ~GradientReducer() override;
  // Adds all_reduce_start / all_reduce_wait nodes for the gradients (buckets in the order
  // backward produces them) and returns the reduced gradients (invalid ones stay invalid).
  // `loss` (a scalar) rides on the last bucket as one more float, 1 when it is NaN or inf:
  // *nonfinite becomes the number of replicas (all workers) whose loss was not finite this
  // step, so every replica stops on the same step without another round trip.
  // started != nullptr (a shard program, below): only the all_reduce_start nodes, their
  // packed buckets appended to *started; returns no gradients.
  std::vector<Value> insert(Graph& g, const std::vector<Value>& grads, int replica, Value loss,
                            Value* nonfinite, std::vector<Value>* started = nullptr);
  // Gradient shards (lockstep/core/config.h): each local replica r computes k shards one after
  // another. Program index p < local_replicas is replica r = p's last shard (the program with
  // the all-reduce and the optimizer); p = local_replicas + r * (k - 1) + j is shard j < k - 1
  // of replica r, whose buckets are only kept. The last shard's start sums the replica's k
  // buckets as a balanced binary tree in shard order before the all-reduce. k = 1: none.
  void set_shards_per_replica(int k);
  int shards_per_replica() const { return shards_; }
  // Per step: the weight of each program's gradient (its samples / global samples), indexed
  // by program index (the local replica without shards).
  void set_weights(std::vector<float> weights) { weights_ = std::move(weights); }
  float weight(int replica) const override { return weights_.at(size_t(replica)); }
  int replicas() const override { return strategy_.local_replicas; }
  const double* const* gather(int replica, const double* mine, size_t n) override {
    return strategy_.exchange().gather(replica, mine, n);
  }
  void start(int replica, int bucket, float* data, size_t count);
  void wait(int replica, int bucket);
  int64_t group() const { return group_; }
  // Blocking sum of data[0..count) over every replica (cross_replica_sum ops), queued on
  // replica r's communication thread behind any gradient bucket already started, so every
  // replica issues its collectives in the same order.
  void sum_now(int replica, float* data, size_t count);
  // Seconds the replica-0 step spent blocked in waits (last step) and all-reduce busy time.
  static GradientReducer* lookup(int64_t group);
  double wait_seconds() const { return wait_seconds_; }
  double reduce_seconds() const { return reduce_seconds_; }
  void reset_timers() { wait_seconds_ = reduce_seconds_ = 0; }

 private:
  StrategyImpl& strategy_;
  int64_t group_;
  int num_buckets_ = -1;
  std::vector<float> weights_;
  int shards_ = 1;
  std::vector<std::vector<std::vector<std::vector<float>>>> shard_buckets_;  // [r][bucket][j]
  std::vector<std::vector<std::future<void>>> pending_;                      // [replica][bucket]
  std::vector<std::vector<std::chrono::steady_clock::time_point>> started_;
  double wait_seconds_ = 0, reduce_seconds_ = 0;
};

// This worker's part of a dataset of (global) batches under `policy`, rebatched to
// per_worker_batch (distribute_dataset, and evaluate's sharding).
data::Dataset shard_for_worker(const data::Dataset& dataset, int workers, int index,
                               int64_t per_worker_batch, AutoShardPolicy policy);

// Every copy of the core groups of `devices` on this machine ("cpu:K" -> cores).
std::vector<std::vector<int>> device_cores(const std::vector<std::string>& devices);

}  // namespace lockstep::distribute
