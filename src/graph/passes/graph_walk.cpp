// What passes share: readers of values, reachability, and turning a fused node into a view.
#include "graph/internal/passes.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

Consumers consumers_of(const Graph& g, const std::vector<int>& sched,
                       const std::vector<Value>& outputs) {
  Consumers cons;
  for (int i : sched)
    for (Value v : g.node(i).inputs) cons[{v.node, v.index}].push_back(i);
  for (Value v : outputs) cons[{v.node, v.index}].push_back(-1);
  return cons;
}

bool reaches(const Graph& g, const std::vector<Value>& from, int target) {
  std::vector<char> seen(size_t(g.size()), 0);
  std::vector<int> stack;
  for (Value v : from) stack.push_back(v.node);
  while (!stack.empty()) {
    int n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    if (seen[size_t(n)]) continue;
    seen[size_t(n)] = 1;
    for (Value v : g.node(n).inputs) stack.push_back(v.node);
  }
  return false;
}

// The op declared as the view a fused-away node becomes (kFuseView): exactly one.
static OpId view_op() {
  static const OpId id = [] {
    OpId found;
    for (const OpDef* d : OpRegistry::get().ops())
      if (d->fusion & kFuseView) {
        LS_CHECK(!found.valid(), "ops '", found, "' and '", d->name,
                 "' are both declared kFuseView");
        found = d->name;
      }
    LS_CHECK(found.valid(), "no op is declared kFuseView (the view fusions leave behind)");
    return found;
  }();
  return id;
}

void make_view(Node& n, Value src) {
  n.op = view_op();
  n.inputs = {src};
  n.attrs = {};
}

bool is_view(const Node& n) { return n.op == view_op(); }

Value through_views(const Graph& g, Value v) {
  while (is_view(g.node(v.node))) v = g.node(v.node).inputs[0];
  return v;
}

Value producer_through_views(const Graph& g, Consumers& cons, int i, int& reader, bool& single) {
  Value src = g.node(i).inputs[0];
  while (is_view(g.node(src.node))) {
    single = single && cons[{src.node, 0}] == std::vector<int>{reader};
    reader = src.node;
    src = g.node(src.node).inputs[0];
  }
  return src;
}

}  // namespace lockstep
