// A Model's compiled state (src/train/model_runtime.h).
#include "train/model_runtime.h"

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/distribute/strategy.h"

namespace lockstep {

ModelRuntime::ModelRuntime() = default;
ModelRuntime::~ModelRuntime() = default;

void ModelRuntime::compile(ResolvedCompile resolved,
                           std::shared_ptr<distribute::StrategyImpl> strategy) {
  programs_.clear();  // (their device weights come back to the host first)
  resolved_ = std::move(resolved);
  resolved_.residence = residence_;
  strategy_ = std::move(strategy);
  replication_ = strategy_ ? std::make_unique<Replication>(strategy_) : nullptr;
  compiled_ = true;
}

Program& ModelRuntime::program(const Network& network, const std::string& kind, int64_t batch,
                               int replica, int weighted) {
  LS_CHECK(compiled_ || kind == "predict", "Model '", network.name(), "': call compile() before ",
           kind == "train" ? "fit" : "evaluate");
  auto key = std::make_tuple(kind, batch, replica, weighted);
  auto it = programs_.find(key);
  if (it != programs_.end()) return *it->second;
  auto p = std::make_unique<Program>(network, resolved_, program_kind(kind), batch,
                                     replication_.get(), replica, weighted);
  compile_seconds_ += p->compile_seconds();
  return *(programs_[key] = std::move(p));
}

void ModelRuntime::set_shards_per_replica(int k) {
  const int k_now = replication_ ? replication_->shards_per_replica() : 1;
  if (k_now == k) return;
  programs_.clear();  // compiled for the other shard count
  if (!strategy_)     // a replication of its own, for the shards' reducer
    replication_ =
        k > 1 ? std::make_unique<Replication>(distribute::OneDeviceStrategy("cpu:0").impl())
              : nullptr;
  if (replication_) replication_->set_shards_per_replica(k);
}

}  // namespace lockstep
