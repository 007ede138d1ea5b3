// A Model's compiled state (src/trainers/model_runtime.h).
#include "trainers/model_runtime.h"

#include <algorithm>

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
  threads_.reset();
  compiled_ = true;
}

Program& ModelRuntime::program(const Network& network, ProgramKind kind, int64_t batch, int replica,
                               int weighted) {
  LS_CHECK(compiled_ || kind == ProgramKind::predict, "Model '", network.name(),
           "': call compile() before ", kind == ProgramKind::eval ? "evaluate" : "fit");
  auto key = std::make_tuple(kind, batch, replica, weighted);
  auto it = programs_.find(key);
  if (it != programs_.end()) return *it->second;
  Replication* replication = kind == ProgramKind::train ? train_replication() : replication_.get();
  const Program::Kind program_kind = kind == ProgramKind::eval      ? Program::Kind::eval
                                     : kind == ProgramKind::predict ? Program::Kind::predict
                                                                    : Program::Kind::train;
  auto p = std::make_unique<Program>(network, resolved_, program_kind, batch, replication, replica,
                                     weighted);
  compile_seconds_ += p->compile_seconds();
  return *(programs_[key] = std::move(p));
}

std::vector<const Program*> ModelRuntime::largest_train_programs() const {
  std::vector<const Program*> best;
  for (const auto& [key, p] : programs_) {
    if (std::get<0>(key) != ProgramKind::train) continue;
    const size_t replica = size_t(std::get<2>(key));
    if (best.size() <= replica) best.resize(replica + 1, nullptr);
    if (!best[replica] || p->batch() > best[replica]->batch()) best[replica] = p.get();
  }
  const auto gap = std::find(best.begin(), best.end(), nullptr);
  best.erase(gap, best.end());
  return best;
}

void ModelRuntime::set_thread_replicas(int k) {
  if (k == thread_replicas()) return;
  LS_CHECK(k == 1 || (!strategy_ && !replication_),
           "thread replicas are for a model without a strategy or gradient shards");
  for (auto it = programs_.begin(); it != programs_.end();)  // compiled for the other count
    it = std::get<0>(it->first) == ProgramKind::train ? programs_.erase(it) : std::next(it);
  threads_.reset();
  if (k == 1) return;
  std::vector<std::string> devices;
  for (int r = 0; r < k; ++r) {
    std::string device = "cpu:";  // (not "cpu:" + to_string: GCC 12's -Wrestrict false alarm)
    device += std::to_string(r);
    devices.push_back(device);
  }
  distribute::StrategyOptions options;
  options.threads_per_replica = 1;
  threads_ = std::make_unique<Replication>(distribute::MirroredStrategy(devices, options).impl(),
                                           /*threads=*/true);
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
