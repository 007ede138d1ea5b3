// Dead-code elimination and scheduling (passes.h).
#include <algorithm>
#include <functional>

#include "graph/internal/passes.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

std::vector<int> schedule_nodes(const Graph& g, const std::vector<Value>& outputs) {
  const OpRegistry& registry = OpRegistry::get();
  std::vector<char> live(g.size(), 0);
  for (Value v : outputs) live[v.node] = 1;
  for (int i = 0; i < g.size(); ++i)
    if (registry.op(g.node(i).op).side_effects) live[i] = 1;
  for (int i = g.size() - 1; i >= 0; --i) {
    if (!live[i]) continue;
    for (Value v : g.node(i).inputs) live[v.node] = 1;
  }
  std::vector<int> pure, effects;
  for (int i = 0; i < g.size(); ++i) {
    if (!live[i]) continue;
    (registry.op(g.node(i).op).side_effects ? effects : pure).push_back(i);
  }
  // Index order is topological as built; a rewrite (fusion) may give a node an input made
  // later (a mixed-precision bias cast after its conv): such inputs move up to just before
  // their first consumer.
  std::vector<char> emitted(g.size(), 0);
  std::vector<int> order;
  std::function<void(int)> visit = [&](int i) {
    if (emitted[i]) return;
    emitted[i] = 1;
    for (Value v : g.node(i).inputs) visit(v.node);
    order.push_back(i);
  };
  for (int i : pure) visit(i);
  for (int i : effects) visit(i);
  pure = std::move(order);
  // Nodes marked "schedule_early" (a gradient bucket's all-reduce start) move up to right after
  // their last producer, so their work overlaps whatever is scheduled after.
  for (size_t k = 0; k < pure.size(); ++k) {
    const Node& nd = g.node(pure[k]);
    if (!nd.attrs.b("schedule_early")) continue;
    size_t target = 0;
    for (Value v : nd.inputs)
      for (size_t j = 0; j < k; ++j)
        if (pure[j] == v.node) target = std::max(target, j + 1);
    if (target < k) {
      int id = pure[k];
      pure.erase(pure.begin() + long(k));
      pure.insert(pure.begin() + long(target), id);
    }
  }
  return pure;
}

}  // namespace lockstep
