// lower_graph: the graph's needed nodes, in order, through the lowering table (see
// lower_graph.h).
#include "backends/xla/lower_graph.h"

#include <algorithm>

#include "backends/xla/lowering.h"
#include "backends/xla/sharding_lowering.h"
#include "lockstep/core/error.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

std::string node_text(const Node& n) {
  return "op '" + n.op + "'" + (n.name.empty() ? "" : " '" + n.name + "'") + " (node " +
         std::to_string(n.id) + ")";
}

// Nodes the outputs and the side-effect nodes (updates) depend on.
// (without side_effects: the outputs only)
std::vector<char> needed_nodes(const Graph& g, const std::vector<Value>& outputs,
                               bool side_effects) {
  std::vector<char> need(size_t(g.size()), 0);
  for (Value v : outputs) need.at(size_t(v.node)) = 1;
  for (const Node& n : g.nodes())
    if (side_effects && OpRegistry::get().op(n.op).side_effects) need[size_t(n.id)] = 1;
  for (int i = g.size() - 1; i >= 0; --i)
    if (need[size_t(i)])
      for (Value v : g.node(i).inputs) need[size_t(v.node)] = 1;
  return need;
}

HloType known_type(const TensorType& t, const std::string& what) {
  LS_CHECK(t.shape.is_known(), "xla: ", what, " has an unknown dim ", t.shape.str(),
           " (specialise the graph's batch first: Graph::specialise_batch)");
  return hlo_type(t);
}

// The location of a node's ops in the module, which compile errors quote.
std::string location_of(const Node& n) {
  return n.op + (n.name.empty() ? "" : " '" + n.name + "'") + " #" + std::to_string(n.id);
}

// Arguments: the inputs (of every step), the step counter, then each variable the needed nodes
// read.
void add_arguments(const Graph& g, const std::vector<Value>& inputs, const std::vector<char>& need,
                   int steps, LoweredGraph& out, std::vector<const Node*>& variable_nodes) {
  for (int k = 0; k < steps; ++k)
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Node& n = g.node(inputs[i].node);
      LS_CHECK(n.op == op::input, "xla: lower_graph input ", i, " is ", node_text(n),
               ", not an input placeholder");
      HloType t = known_type(g.type(inputs[i]), "input '" + n.name + "'");
      out.arguments.push_back(
          {LoweredArgument::Kind::input, int(size_t(k) * inputs.size() + i), nullptr, t});
    }
  // Random draws keyed by the step: dropout, and attention with dropout on its weights.
  auto draws = [](const Node& n) {
    return n.op == op::dropout || ((n.op == op::scaled_dot_product_attention ||
                                    n.op == op::scaled_dot_product_attention_grad) &&
                                   attr_f(n, "dropout") > 0);
  };
  for (const Node& n : g.nodes())
    if (need[size_t(n.id)] && draws(n)) {
      out.arguments.push_back({LoweredArgument::Kind::step, -1, nullptr, {ElemType::i64, {}}});
      break;
    }
  for (const Node& n : g.nodes())
    if (need[size_t(n.id)] && n.op == op::variable) {
      LS_CHECK(n.variable, "xla: ", node_text(n), " has no variable");
      bool seen = false;
      for (const Node* v : variable_nodes) seen |= v->variable == n.variable;
      if (seen) continue;
      HloType t = known_type(n.outputs[0], "variable '" + n.variable->name + "'");
      out.arguments.push_back({LoweredArgument::Kind::variable, -1, n.variable, t});
      variable_nodes.push_back(&n);
    }
}

// Emits one node through its lowering; float outputs rounded to the node's declared dtypes.
void lower_node(LoweringContext& cx, const Node& n) {
  const LowerFn* fn = find_lowering(n.op);
  if (!fn) {
    const OpRegistry& r = OpRegistry::get();
    const std::string why = r.has(n.op) ? r.op(n.op).xla.none : "";
    LS_FAIL("xla: ", node_text(n), " has no StableHLO lowering",
            why.empty() ? "" : " (" + why + ")",
            ", so this program cannot run on the xla backend (run it on \"cpu\", or add the "
            "op's lowering in src/backends/xla/lowering_*.cpp)");
  }
  for (const char* key : {"layout", "src_layout", "dst_layout"})
    LS_CHECK(!n.attrs.has(key) || n.attrs.s(key) == "nhwc", "xla: ", node_text(n), " has ", key,
             "=", n.attrs.s(key),
             ", the cpu backend's blocked layout; lower the graph before "
             "the cpu layout pass (the xla backend takes nhwc)");
  cx.b.set_location(location_of(n));
  std::vector<HloValue> outs;
  try {
    outs = (*fn)(cx, n);
  } catch (const Error& e) {
    LS_FAIL("xla: lowering ", node_text(n), ": ", e.what());
  }
  LS_CHECK(outs.size() == n.outputs.size(), "xla: the lowering of ", node_text(n), " gave ",
           outs.size(), " values for ", n.outputs.size(), " outputs");
  for (size_t k = 0; k < outs.size(); ++k) {
    HloType want = hlo_type(n.outputs[k]);
    HloValue v = cx.b.convert(outs[k], want.elem);
    LS_CHECK(v.type == want, "xla: the lowering of ", node_text(n), " output ", k, " is ",
             v.type.str(), ", the graph says ", want.str());
    cx.values[{n.id, int(k)}] = v;
  }
}

// One step's nodes, on `step_inputs` (its input arguments); appends its outputs to `results`.
// (oc: the layer outputs to constrain under a sharding plan, or null)
void lower_step(LoweringContext& cx, const Graph& g, const std::vector<char>& need,
                const std::vector<Value>& inputs, const std::vector<Value>& outputs,
                const HloValue* step_inputs, int step, LoweredGraph& out,
                std::vector<HloValue>& results, const OutputConstraints* oc = nullptr) {
  cx.values.clear();  // (the variables carry over, in cx.variable_values)
  for (size_t i = 0; i < inputs.size(); ++i) cx.values[{inputs[i].node, 0}] = step_inputs[i];
  for (const Node& n : g.nodes()) {
    if (!need[size_t(n.id)] || n.op == op::input) continue;
    if (n.op == op::variable) {
      cx.values[{n.id, 0}] = cx.variable_values.at(n.variable.get());
      continue;
    }
    lower_node(cx, n);
    if (oc) {
      HloValue& y = cx.values[{n.id, 0}];
      y = constrain_output(*oc, n, y, cx.b);
    }
  }
  for (size_t k = 0; k < outputs.size(); ++k) {
    auto it = cx.values.find({outputs[k].node, outputs[k].index});
    LS_CHECK(it != cx.values.end(), "xla: output ", k, " was not lowered");
    results.push_back(it->second);
    out.results.push_back({LoweredResult::Kind::output, int(size_t(step) * outputs.size() + k),
                           nullptr, -1, it->second.type});
  }
}

// steps > 1: the steps as one stablehlo.while (see lower_graph.h). The carry: the counter k,
// the step counter (when the program has one), every variable, the stacked inputs and the
// stacked outputs.
void lower_loop(LoweringContext& cx, const Graph& g, const std::vector<char>& need,
                const std::vector<Value>& inputs, const std::vector<Value>& outputs,
                const std::vector<HloValue>& args, const HloValue& step_counter,
                const std::vector<const Node*>& variable_nodes, int steps, LoweredGraph& out,
                std::vector<HloValue>& results) {
  StablehloBuilder& b = cx.b;
  auto stacked_as = [](int64_t n, const std::vector<int64_t>& dims) {  // {n, dims...}
    std::vector<int64_t> s{n};
    s.insert(s.end(), dims.begin(), dims.end());
    return s;
  };
  // (k, 0, 0, ...): the start of step k's slice. Every value a region uses is made in it or
  // carried into it (no captures from the enclosing function).
  auto starts = [&](const HloValue& k, int rank) {
    std::vector<HloValue> at(size_t(rank) + 1, b.scalar(ElemType::i64, 0));
    at[0] = k;
    return at;
  };
  std::vector<HloValue> init{b.scalar(ElemType::i64, 0)};
  const bool has_step = !step_counter.name.empty();
  if (has_step) init.push_back(step_counter);
  for (const Node* v : variable_nodes) init.push_back(cx.variable_values.at(v->variable.get()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<HloValue> parts;
    for (int k = 0; k < steps; ++k) {
      const HloValue& a = args[size_t(k) * inputs.size() + i];
      parts.push_back(b.reshape(a, stacked_as(1, a.type.dims)));
    }
    init.push_back(b.concatenate(parts, 0));
  }
  std::vector<HloType> out_types;
  for (Value v : outputs) {
    out_types.push_back(hlo_type(g.type(v)));
    init.push_back(
        cx.full(HloType{out_types.back().elem, stacked_as(steps, out_types.back().dims)}, 0));
  }
  const size_t first_var = has_step ? 2 : 1, first_in = first_var + variable_nodes.size(),
               first_out = first_in + inputs.size();
  auto cond = [&](const std::vector<HloValue>& c) -> std::vector<HloValue> {
    return {b.compare(c[0], b.scalar(ElemType::i64, double(steps)), Compare::LT)};
  };
  auto body = [&](const std::vector<HloValue>& c) -> std::vector<HloValue> {
    const HloValue k = c[0];
    if (has_step) cx.step = b.add(c[1], k);
    for (size_t v = 0; v < variable_nodes.size(); ++v)
      cx.variable_values[variable_nodes[v]->variable.get()] = c[first_var + v];
    std::vector<HloValue> step_inputs;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const HloValue& s = c[first_in + i];
      std::vector<int64_t> one = s.type.dims;
      one[0] = 1;
      HloValue x = b.dynamic_slice(s, starts(k, s.type.rank() - 1), one);
      step_inputs.push_back(b.reshape(x, {one.begin() + 1, one.end()}));
    }
    std::vector<HloValue> step_results;
    LoweredGraph scratch;  // (the results' records are made once, after the loop)
    lower_step(cx, g, need, inputs, outputs, step_inputs.data(), 0, scratch, step_results);
    std::vector<HloValue> next{b.add(k, b.scalar(ElemType::i64, 1))};
    if (has_step) next.push_back(c[1]);
    for (const Node* v : variable_nodes) next.push_back(cx.variable_values.at(v->variable.get()));
    for (size_t i = 0; i < inputs.size(); ++i) next.push_back(c[first_in + i]);
    for (size_t o = 0; o < outputs.size(); ++o) {
      HloValue y = b.reshape(step_results[o], stacked_as(1, out_types[o].dims));
      next.push_back(b.dynamic_update_slice(c[first_out + o], y, starts(k, out_types[o].rank())));
    }
    return next;
  };
  const std::vector<HloValue> done = b.while_loop(init, cond, body);
  for (size_t v = 0; v < variable_nodes.size(); ++v)
    cx.variable_values[variable_nodes[v]->variable.get()] = done[first_var + v];
  for (int k = 0; k < steps; ++k)
    for (size_t o = 0; o < outputs.size(); ++o) {
      const HloValue& s = done[first_out + o];
      std::vector<int64_t> lo(size_t(s.type.rank()), 0), hi = s.type.dims;
      lo[0] = k, hi[0] = k + 1;
      results.push_back(b.reshape(b.slice(s, lo, hi), out_types[o].dims));
      out.results.push_back({LoweredResult::Kind::output, int(size_t(k) * outputs.size() + o),
                             nullptr, -1, out_types[o]});
    }
}

}  // namespace

std::vector<bool> LoweredGraph::donate() const {
  std::vector<bool> d(arguments.size(), false);
  for (const LoweredResult& r : results)
    if (r.kind == LoweredResult::Kind::variable) d.at(size_t(r.argument)) = true;
  return d;
}

LoweredGraph lower_graph(const Graph& g, const std::vector<Value>& inputs,
                         const std::vector<Value>& outputs, const LoweringOptions& options) {
  LS_CHECK(options.steps >= 1, "xla: lower_graph needs steps >= 1, got ", options.steps);
  LoweredGraph out;
  out.num_replicas = options.num_replicas;
  const std::vector<char> need = needed_nodes(g, outputs, options.side_effects);
  // The arguments' aliases are known once the updates are lowered: set at the end.
  StablehloBuilder b;
  b.set_num_replicas(options.num_replicas);
  LoweringContext cx(b, g);
  cx.num_replicas = options.num_replicas;
  cx.mean_gradients = options.mean_gradients;
  cx.seed = options.seed;
  cx.replica = options.replica;
  std::vector<const Node*> variable_nodes;
  add_arguments(g, inputs, need, options.steps, out, variable_nodes);
  std::vector<HloValue> args;
  for (const LoweredArgument& a : out.arguments) args.push_back(b.argument(a.type));
  size_t first_variable = size_t(options.steps) * inputs.size();
  HloValue step_counter;
  if (first_variable < out.arguments.size() &&
      out.arguments[first_variable].kind == LoweredArgument::Kind::step)
    step_counter = args[first_variable++];
  for (size_t k = 0; k < variable_nodes.size(); ++k)
    cx.variable_values[variable_nodes[k]->variable.get()] = args[first_variable + k];
  std::vector<HloValue> results;
  std::optional<OutputConstraints> constraints;
  if (options.sharding) constraints = output_constraints(g, *options.sharding, options.shardy);
  if (options.steps > 1 && options.loop) {
    lower_loop(cx, g, need, inputs, outputs, args, step_counter, variable_nodes, options.steps, out,
               results);
  } else {
    for (int k = 0; k < options.steps; ++k) {
      if (!step_counter.name.empty())
        cx.step = k == 0 ? step_counter : b.add(step_counter, b.scalar(ElemType::i64, double(k)));
      lower_step(cx, g, need, inputs, outputs, args.data() + size_t(k) * inputs.size(), k, out,
                 results, constraints ? &*constraints : nullptr);
    }
  }
  for (const Variable* var : cx.updated) {
    int arg = -1;
    for (size_t a = 0; a < out.arguments.size(); ++a)
      if (out.arguments[a].variable.get() == var) arg = int(a);
    const HloValue& v = cx.variable_values.at(var);
    results.push_back(v);
    b.set_argument_alias(arg, int(results.size()) - 1);
    out.results.push_back(
        {LoweredResult::Kind::variable, -1, out.arguments[size_t(arg)].variable, arg, v.type});
  }
  b.set_location("");
  b.ret(results);
  if (options.sharding) {
    LS_CHECK(options.num_replicas == 1, "xla: a program partitioned over a mesh (",
             options.sharding->describe(), ") cannot also run as ", options.num_replicas,
             " replicas; use the distribution's batch axis for data parallelism");
    annotate_shardings(*options.sharding, !cx.updated.empty(), options.shardy, b, out);
  }
  out.mlir = b.module_text();
  return out;
}

}  // namespace lockstep::xla
