// Optimizer update fusion (passes.h): consecutive kFuseUpdate nodes of one optimizer become one
// node with count = n that updates every variable in one pass; the others become dead views.
// Only neighbours in the schedule fuse, so no other side effect moves across an update.
#include "graph/internal/passes.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

namespace {

// Inputs of an update: (var, grad, lr, slots...[, step]); the run shares lr and the step.
struct UpdateRun {
  std::vector<int> nodes;
  bool step = false;  // kFuseUpdateStep: the last input is the shared step
};

std::vector<Value> merged_inputs(const Graph& g, const UpdateRun& run) {
  const size_t per = g.node(run.nodes[0]).inputs.size();
  const size_t slots = per - 3 - (run.step ? 1 : 0);
  std::vector<Value> in;
  for (size_t part : {size_t(0), size_t(1)})
    for (int i : run.nodes) in.push_back(g.node(i).inputs[part]);
  in.push_back(g.node(run.nodes[0]).inputs[2]);
  for (size_t s = 0; s < slots; ++s)
    for (int i : run.nodes) in.push_back(g.node(i).inputs[3 + s]);
  if (run.step) in.push_back(g.node(run.nodes[0]).inputs.back());
  return in;
}

}  // namespace

void fuse_updates(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report) {
  const OpRegistry& registry = OpRegistry::get();
  auto sched = schedule_nodes(g, outputs);
  auto fusable = [&](int i) {
    const Node& n = g.node(i);
    return (registry.op(n.op).fusion & kFuseUpdate) && attr_i(n, "count") == 1;
  };
  // Same op, attributes, input count, learning rate (input 2) and step.
  auto compatible = [&](int a, int b) {
    const Node &x = g.node(a), &y = g.node(b);
    if (x.op != y.op || x.inputs.size() != y.inputs.size() || x.inputs[2] != y.inputs[2] ||
        x.attrs.str() != y.attrs.str())
      return false;
    return !(registry.op(x.op).fusion & kFuseUpdateStep) || x.inputs.back() == y.inputs.back();
  };
  for (size_t k = 0; k < sched.size();) {
    if (!fusable(sched[k])) {
      ++k;
      continue;
    }
    UpdateRun run{{sched[k]}, (registry.op(g.node(sched[k]).op).fusion & kFuseUpdateStep) != 0};
    while (k + run.nodes.size() < sched.size() && fusable(sched[k + run.nodes.size()]) &&
           compatible(sched[k], sched[k + run.nodes.size()]))
      run.nodes.push_back(sched[k + run.nodes.size()]);
    k += run.nodes.size();
    if (run.nodes.size() < 2) continue;
    std::vector<Value> in = merged_inputs(g, run);
    for (size_t j = 1; j < run.nodes.size(); ++j) {
      Node& dead = g.node(run.nodes[j]);
      const Value var = dead.inputs[0];
      make_view(dead, var);
      dead.outputs = {g.type(var)};
    }
    Node& fused = g.node(run.nodes[0]);
    fused.inputs = std::move(in);
    fused.attrs.set("count", int(run.nodes.size()));
    report.push_back("fused " + std::to_string(run.nodes.size()) + " " + fused.op +
                     " into one pass");
  }
}

}  // namespace lockstep
