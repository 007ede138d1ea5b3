// Strategy: scope, replica counts, run/reduce for custom loops, dataset distribution, and the
// three strategies' constructors.
#include "lockstep/distribute/strategy.h"

#include <thread>

#include "distribute/internal/strategy_runtime.h"

namespace lockstep::distribute {

namespace {
thread_local std::shared_ptr<StrategyImpl> t_current;
}

int64_t InputContext::get_per_replica_batch_size(int64_t global_batch_size) const {
  LS_CHECK(num_replicas_in_sync >= 1 && global_batch_size % num_replicas_in_sync == 0,
           "InputContext: the global batch size ", global_batch_size,
           " is not divisible by the number of replicas in sync (", num_replicas_in_sync, ")");
  return global_batch_size / num_replicas_in_sync;
}

void ReplicaContext::all_reduce_sum(Tensor& value) const {
  LS_CHECK(value.dtype() == DType::f32 && value.is_contiguous(),
           "ReplicaContext::all_reduce_sum: expects a contiguous float32 tensor");
  strategy->allreduce_now(local_replica_id, value.data<float>(), size_t(value.numel()));
}

Strategy::Scope::Scope(std::shared_ptr<StrategyImpl> s) : previous_(t_current) {
  LS_CHECK(s, "Strategy::scope(): the strategy is empty (default-constructed)");
  t_current = std::move(s);
}
Strategy::Scope::~Scope() { t_current = previous_; }

std::shared_ptr<StrategyImpl> Strategy::current() { return t_current; }

std::string Strategy::name() const { return impl_ ? impl_->name : "none"; }
int Strategy::num_replicas_in_sync() const { return impl_ ? impl_->replicas_in_sync() : 1; }
int Strategy::num_local_replicas() const { return impl_ ? impl_->local_replicas : 1; }
int Strategy::num_workers() const { return impl_ ? impl_->num_workers : 1; }
int Strategy::worker_index() const { return impl_ ? impl_->worker_index : 0; }
bool Strategy::is_chief() const { return !impl_ || impl_->is_chief(); }
const std::vector<std::string>& Strategy::devices() const {
  static const std::vector<std::string> none;
  return impl_ ? impl_->devices : none;
}

PerReplica Strategy::run(const std::function<Tensor(const ReplicaContext&)>& fn) const {
  LS_CHECK(impl_, "Strategy::run: the strategy is empty");
  PerReplica out(size_t(impl_->local_replicas));
  impl_->run_replicas([&](int r) {
    ReplicaContext ctx{impl_->worker_index * impl_->local_replicas + r, r,
                       impl_->replicas_in_sync(), impl_.get()};
    out[size_t(r)] = fn(ctx);
  });
  return out;
}

Tensor Strategy::reduce(ReduceOp op, const PerReplica& value) const {
  LS_CHECK(impl_, "Strategy::reduce: the strategy is empty");
  LS_CHECK(int(value.size()) == impl_->local_replicas, "Strategy::reduce: expected ",
           impl_->local_replicas, " per-replica values, got ", value.size());
  const Shape& shape = value[0].shape();
  std::vector<double> sum(size_t(value[0].numel()), 0.0);
  for (auto& v : value) {  // replica order: deterministic
    LS_CHECK(v.shape() == shape, "Strategy::reduce: per-replica values disagree in shape (",
             v.shape().str(), " vs ", shape.str(), ")");
    std::vector<float> f = v.to_vector();
    for (size_t i = 0; i < f.size(); ++i) sum[i] += f[i];
  }
  impl_->allreduce_workers(sum.data(), sum.size());
  // (MEAN: over the values summed, one per host replica: an XlaStrategy's device replicas
  // are inside its programs)
  const double scale =
      op == ReduceOp::MEAN ? 1.0 / (impl_->local_replicas * impl_->num_workers) : 1.0;
  Tensor out = Tensor::empty(shape);
  for (size_t i = 0; i < sum.size(); ++i) out.data<float>()[i] = float(sum[i] * scale);
  return out;
}

bool DistributedDataset::next_per_replica(data::Iterator& it,
                                          std::vector<data::Element>& out) const {
  data::Element e;
  if (!it.next(e)) return false;
  out = data::split_batch(e, local_replicas_);
  return true;
}

data::Dataset shard_for_worker(const data::Dataset& dataset, int workers, int index,
                               int64_t per_worker_batch, AutoShardPolicy policy) {
  switch (policy) {
    case AutoShardPolicy::OFF:  // every worker reads everything
      return dataset.unbatch().batch(per_worker_batch);
    case AutoShardPolicy::FILE:
      LS_CHECK(dataset.reads_files(),
               "distribute_dataset: AutoShardPolicy::FILE needs a file source (list_files, "
               "image_dataset_from_directory, from_tensor_slices of paths) in ",
               dataset.description(), "; use AUTO or DATA");
      [[fallthrough]];
    case AutoShardPolicy::AUTO:
      if (dataset.reads_files())  // each worker opens and decodes only its share of the files
        return dataset.shard_files(workers, index).unbatch().batch(per_worker_batch);
      [[fallthrough]];
    case AutoShardPolicy::DATA:  // every worker reads everything, keeps every W-th element
      break;
  }
  return dataset.unbatch().shard(workers, index).batch(per_worker_batch);
}

DistributedDataset Strategy::distribute_dataset(const data::Dataset& dataset,
                                                AutoShardPolicy policy) const {
  LS_CHECK(impl_, "distribute_dataset: the strategy is empty");
  const int R = impl_->replicas_in_sync(), W = impl_->num_workers;
  data::ElementSpec spec = dataset.probe_element_spec();
  LS_CHECK(!spec.components.empty() && spec.components[0].kind == data::ComponentKind::tensor &&
               spec.components[0].shape.rank() >= 1,
           "distribute_dataset: elements must be batched tensors, got ", spec.str());
  const int64_t global = spec.components[0].shape[0];
  LS_CHECK(global > 0 && global % R == 0, "distribute_dataset: the global batch size ", global,
           " is not divisible by the ", R, " replicas in sync of ", impl_->name,
           " (batch the dataset with a multiple of ", R, ")");
  if (W == 1) return DistributedDataset(dataset, impl_->local_replicas, false);
  data::Dataset local = shard_for_worker(dataset, W, impl_->worker_index, global / W, policy);
  return DistributedDataset(local, impl_->local_replicas, false);
}

DistributedDataset Strategy::distribute_datasets_from_function(
    const std::function<data::Dataset(const InputContext&)>& fn) const {
  LS_CHECK(impl_, "distribute_datasets_from_function: the strategy is empty");
  InputContext ctx{impl_->num_workers, impl_->worker_index, impl_->replicas_in_sync()};
  data::Dataset ds = fn(ctx);
  LS_CHECK(ds.valid(), "distribute_datasets_from_function: the function returned an empty dataset");
  if (impl_->local_replicas == 1) return DistributedDataset(ds, 1, true);
  data::ElementSpec spec = ds.probe_element_spec();
  const int64_t per_replica = spec.components.at(0).shape[0];
  // The local batch: local_replicas consecutive per-replica batches side by side.
  return DistributedDataset(ds.unbatch().batch(per_replica * impl_->local_replicas),
                            impl_->local_replicas, true);
}

Strategy OneDeviceStrategy(const std::string& device, StrategyOptions options) {
  return Strategy(std::make_shared<StrategyImpl>("OneDeviceStrategy",
                                                 std::vector<std::string>{device}, options,
                                                 ClusterResolver::local(), false));
}

Strategy MirroredStrategy(std::vector<std::string> devices, StrategyOptions options) {
  if (devices.empty()) {
    int n = std::max(1u, std::thread::hardware_concurrency());
    for (int k = 0; k < n; ++k) devices.push_back("cpu:" + std::to_string(k));
  }
  return Strategy(std::make_shared<StrategyImpl>("MirroredStrategy", std::move(devices), options,
                                                 ClusterResolver::local(), false));
}

Strategy MultiWorkerMirroredStrategy(const ClusterResolver& resolver, StrategyOptions options) {
  LS_CHECK(options.replicas_per_worker >= 1,
           "MultiWorkerMirroredStrategy: replicas_per_worker must be >= 1");
  std::vector<std::string> devices;
  for (int k = 0; k < options.replicas_per_worker; ++k)
    devices.push_back("cpu:" + std::to_string(k));
  return Strategy(std::make_shared<StrategyImpl>("MultiWorkerMirroredStrategy", std::move(devices),
                                                 options, resolver, true));
}

Strategy strategy_from_name(const std::string& name, StrategyOptions options) {
  if (name.empty()) return Strategy();
  if (name == "one_device") return OneDeviceStrategy("cpu:0", options);
  if (name == "mirrored") return MirroredStrategy({}, options);
  if (name == "multi_worker")
    return MultiWorkerMirroredStrategy(ClusterResolver::from_environment(), options);
  throw Error("unknown strategy '" + name + "' (one_device, mirrored or multi_worker)");
}

}  // namespace lockstep::distribute
