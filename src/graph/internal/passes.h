// The graph's generic passes and the helpers every pass shares (graph's declared internal
// interface: the ops' fusions and the backends' passes use it). Nothing here names an op: a
// pass reads what the op declarations say (OpDef: side_effects, fusion roles, ...).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep {

// Dead-code elimination + scheduling: pure nodes reachable from `outputs` in index order,
// then side-effect nodes in index order; nodes with attr schedule_early=true then move up to
// right after their last producer (the gradient all-reduce starts).
std::vector<int> schedule_nodes(const Graph& g, const std::vector<Value>& outputs);

// The readers of every value of the scheduled nodes `sched`; a graph output counts as -1.
using Consumers = std::map<std::pair<int, int>, std::vector<int>>;
Consumers consumers_of(const Graph& g, const std::vector<int>& sched,
                       const std::vector<Value>& outputs);

// Whether `target` is among the nodes `from` (transitively) reads: a rewrite that would make
// `target` read one of them would close a cycle.
bool reaches(const Graph& g, const std::vector<Value>& from, int target);

// Turns a node a fusion absorbed into a view of `src` (the op declared kFuseView): it computes
// nothing, and scheduling drops it when nothing reads it.
void make_view(Node& n, Value src);
bool is_view(const Node& n);
// v, or what it views through a chain of views.
Value through_views(const Graph& g, Value v);
// Node i's input 0, followed back through the views earlier fusions left (a bias_add fused into
// a conv, a folded batch norm): the value that produces it. `reader` ends as the node that reads
// that value (i, or the last view); `single` is set false unless each view is the only reader
// of the one before.
Value producer_through_views(const Graph& g, Consumers& cons, int i, int& reader, bool& single);

// Neighbouring optimizer updates (kFuseUpdate) of one optimizer (same op, attributes, learning
// rate and step) become one node with count = n that updates every variable in one pass.
void fuse_updates(Graph& g, std::vector<Value>& outputs, std::vector<std::string>& report);

}  // namespace lockstep
