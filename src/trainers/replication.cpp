// The replicas of one model (replication.h): variable copies, their syncs, and averages over
// replicas and workers.
#include "trainers/replication.h"

#include <algorithm>
#include <utility>

#include "distribute/internal/strategy_runtime.h"

namespace lockstep {

Replication::Replication(std::shared_ptr<distribute::StrategyImpl> strategy, bool threads)
    : strategy_(std::move(strategy)),
      threads_(threads),
      reducer_(std::make_unique<distribute::GradientReducer>(*strategy_)) {}

Replication::~Replication() = default;

int Replication::local_replicas() const { return strategy_->local_replicas; }

int Replication::shards_per_replica() const { return reducer_->shards_per_replica(); }

void Replication::set_shards_per_replica(int k) {
  reducer_->set_shards_per_replica(k);
  // Copies of the shard programs of another shard count are no programs' any more.
  const size_t programs = size_t(local_replicas() * k);
  for (auto& [primary, list] : copies_)
    if (list.size() + 1 > programs) list.resize(std::max<size_t>(programs, 1) - 1);
}

bool Replication::reduces() const { return strategy_->replicated() || shards_per_replica() > 1; }

int Replication::owner(int program) const {
  const int local = local_replicas();
  return program < local ? program : (program - local) / (shards_per_replica() - 1);
}

VariablePtr Replication::variable(const VariablePtr& v, int replica) {
  if (replica == 0) return v;
  auto& list = copies_[v.get()];
  const int count = std::max(local_replicas() - 1, replica);
  while (int(list.size()) < count)
    list.push_back(std::make_shared<Variable>(Variable{v->name, v->value.clone(), v->trainable}));
  return list.at(size_t(replica - 1));
}

void Replication::sync_from_primary() {
  for (auto& [primary, list] : copies_)
    for (auto& c : list) c->value.copy_from(primary->value);
}

void Replication::sync_from_primary(const std::vector<VariablePtr>& only) {
  for (const VariablePtr& v : only)
    if (auto it = copies_.find(v.get()); it != copies_.end())
      for (auto& c : it->second) c->value.copy_from(v->value);
}

void Replication::fold_into_primary(const std::vector<VariablePtr>& accumulators) {
  for (auto& v : accumulators) {
    auto it = copies_.find(v.get());
    if (it == copies_.end()) continue;
    float* dst = v->value.data<float>();
    const int64_t n = v->value.numel();
    for (auto& c : it->second) {
      float* src = c->value.data<float>();
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i], src[i] = 0.f;
    }
  }
}

void Replication::average(const std::vector<VariablePtr>& variables) {
  for (auto& v : variables) {
    if (v->value.dtype() != DType::f32) continue;
    // Over every copy: the replicas', and the shard programs' (lockstep/core/config.h).
    auto it = copies_.find(v.get());
    const size_t local =
        std::max<size_t>(size_t(local_replicas()), it == copies_.end() ? 1 : it->second.size() + 1);
    const double scale = 1.0 / double(local * size_t(strategy_->num_workers));
    const int64_t n = v->value.numel();
    std::vector<double> sum(static_cast<size_t>(n));
    const float* p = v->value.data<float>();
    for (int64_t i = 0; i < n; ++i) sum[size_t(i)] = p[i];
    if (it != copies_.end())
      for (auto& c : it->second) {
        const float* q = c->value.data<float>();
        for (int64_t i = 0; i < n; ++i) sum[size_t(i)] += q[i];
      }
    strategy_->allreduce_workers(sum.data(), sum.size());
    float* dst = v->value.data<float>();
    for (int64_t i = 0; i < n; ++i) dst[i] = float(sum[size_t(i)] * scale);
    if (it != copies_.end())
      for (auto& c : it->second) c->value.copy_from(v->value);
  }
}

}  // namespace lockstep
