// Model::step_memory and Model::summary's memory line: what fit's compiled train step holds (the
// memory planner's arenas, the kernels' workspaces, the variables), read from its Executables:
// one program, or one per replica when fit splits each batch over thread replicas.
#include <algorithm>
#include <iostream>
#include <set>

#include "distribute/internal/strategy_runtime.h"
#include "lockstep/graph/sharding.h"
#include "lockstep/trainers/model.h"
#include "trainers/fit_loop.h"
#include "trainers/model_runtime.h"
#include "trainers/thread_replicas.h"

namespace lockstep {

namespace {

StepMemory memory_of(const std::vector<const Program*>& programs) {
  StepMemory m;
  std::set<const void*> seen;  // a variable the replicas share counts once
  for (const Program* p : programs) {
    const Executable& e = p->executable();
    m.batch_size += p->batch();
    m.arena_bytes += e.arena_bytes();
    m.workspace_bytes += e.workspace_bytes();
    for (const Node& n : e.graph().nodes())
      if (n.variable && n.variable->value.defined() && seen.insert(n.variable->value.raw()).second)
        m.variable_bytes += n.variable->value.nbytes();
    m.planned = m.planned && e.target().empty();  // a whole-graph backend plans its own memory
    if (m.device.devices == 0) m.device = e.device_memory();
  }
  m.replicas = int(programs.size());
  m.peak_bytes = m.arena_bytes + m.workspace_bytes + m.variable_bytes;
  return m;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

// Under a distribution: the bytes of the optimizer's state one device holds (each slot takes
// its variable's layout; the step count and learning rate are on every device).
void summary_optimizer_shards(const Model& model, std::ostream& os) {
  const std::shared_ptr<const ShardingPlan> plan = sharding_plan();
  const auto& opt = model.compile_config().optimizer;
  if (!plan || !opt) return;
  std::vector<const Variable*> list;
  std::set<const Variable*> weights;
  for (const VariablePtr& w : model.weights()) list.push_back(w.get()), weights.insert(w.get());
  for (const VariablePtr& v : opt->variables())
    if (!weights.count(v.get())) list.push_back(v.get());
  const std::vector<DimAxes> layouts = plan->variable_layouts(list, false);
  double whole = 0, mine = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    if (weights.count(list[i])) continue;
    const Tensor& t = list[i]->value;
    whole += double(t.nbytes());
    mine += double(shard_shape(t.shape(), plan->mesh(), layouts[i]).numel()) *
            double(dtype_size(t.dtype()));
  }
  os << " Optimizer state per device: " << human_bytes(mine) << " of " << human_bytes(whole)
     << (list.size() - weights.size() <= 2 ? " (its slots are made at the first train step)" : "")
     << "\n";
}

}  // namespace

StepMemory Model::step_memory(int64_t batch_size) {
  LS_CHECK(runtime_->compiled(), "Model '", name(), "': call compile() before step_memory()");
  LS_CHECK(batch_size > 0, "Model '", name(),
           "': step_memory(batch_size) needs batch_size > 0, got ", batch_size);
  // The programs fit compiles for this batch: split over thread replicas as fit splits it.
  runtime_->set_thread_replicas(fit_thread_replicas(
      *this, runtime_->resolved(), runtime_->replication() != nullptr, batch_size));
  const Replication* r = runtime_->train_replication();
  const int parts = r ? r->local_replicas() : 1;
  // Under several workers the batch is global: this worker steps on its share.
  const int workers = strategy_ ? std::max(1, strategy_->num_workers) : 1;
  const int64_t rows = replica_rows(batch_size, workers, 0).second;
  std::vector<const Program*> programs;
  for (int p = 0; p < parts; ++p) {
    auto [begin, end] = replica_rows(rows, parts, p);
    programs.push_back(&runtime_->program(*this, ModelRuntime::ProgramKind::train, end - begin, p));
  }
  return memory_of(programs);
}

std::optional<StepMemory> Model::compiled_step_memory() const {
  const std::vector<const Program*> programs = runtime_->largest_train_programs();
  if (programs.empty()) return std::nullopt;
  return memory_of(programs);
}

void Model::summary(std::ostream& os) const {
  Network::summary(os);
  if (!runtime_->compiled()) return;
  const std::optional<StepMemory> m = compiled_step_memory();
  if (!m) {
    os << " Train step: not compiled yet (step_memory(batch_size) compiles it and shows its "
          "planned memory here; so does fit)\n";
    return;
  }
  os << " Train step (batch " << m->batch_size;
  if (m->replicas > 1) os << ", " << m->replicas << " thread replicas";
  os << "): peak memory " << human_bytes(double(m->peak_bytes));
  if (m->planned)
    os << " = intermediates " << human_bytes(double(m->arena_bytes)) << " (planned arena)"
       << " + scratch " << human_bytes(double(m->workspace_bytes))
       << " + weights and optimizer state " << human_bytes(double(m->variable_bytes)) << "\n";
  else
    os << " of weights and optimizer state (the backend's compiler plans the intermediates)\n";
  if (const DeviceMemory& d = m->device; d.devices > 0)
    os << " Per device (" << d.devices << " device" << (d.devices > 1 ? "s" : "")
       << ", as compiled): peak " << human_bytes(double(d.peak))
       << (d.peak_from_compiler ? " (the compiler's figure)" : " (at most: the sum of these)")
       << "; arguments " << human_bytes(double(d.arguments))
       << " (weights, optimizer state, the batch's share), intermediates "
       << human_bytes(double(d.temporaries)) << ", outputs "
       << human_bytes(double(d.outputs - d.aliased)) << " besides "
       << human_bytes(double(d.aliased)) << " written in place\n";
  summary_optimizer_shards(*this, os);
}

void Model::summary() const { summary(std::cout); }

}  // namespace lockstep
