// Graph construction with shape inference at every append.
#include "lockstep/graph/graph.h"

#include <algorithm>
#include <atomic>
#include <sstream>

#include "lockstep/graph/op_registry.h"

namespace lockstep {

std::string TensorType::str() const { return std::string(dtype_name(dtype)) + shape.str(); }

std::string Attrs::str() const {
  std::ostringstream os;
  bool first = true;
  for (auto& [k, v] : map_) {
    os << (first ? "" : ", ") << k << "=";
    first = false;
    std::visit(
        [&](auto&& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::vector<int64_t>> ||
                        std::is_same_v<T, std::vector<double>>) {
            os << "[";
            for (size_t i = 0; i < x.size(); ++i) os << (i ? "," : "") << x[i];
            os << "]";
          } else {
            os << x;
          }
        },
        v);
  }
  return os.str();
}

std::vector<Value> Graph::add_multi(OpId op, std::vector<Value> inputs, Attrs attrs,
                                    const std::string& name, VariablePtr var) {
  const OpDef& def = OpRegistry::get().op(op);
  try {
    check_attrs(def, attrs);
  } catch (const Error& e) {
    LS_FAIL(op, (name.empty() ? "" : " '" + name + "'"), ": ", e.what());
  }
  Node n;
  n.id = int(nodes_.size());
  n.op = op;
  n.name = name;
  n.attrs = std::move(attrs);
  n.inputs = std::move(inputs);
  n.variable = std::move(var);
  std::vector<TensorType> in_types;
  for (Value v : n.inputs) {
    LS_CHECK(
        v.valid() && v.node < int(nodes_.size()) && v.index < int(nodes_[v.node].outputs.size()),
        op, " '", name, "': invalid input value");
    in_types.push_back(type(v));
  }
  // bf16 compute: infer as f32, then the listed float outputs follow the inputs into bf16.
  bool lower = false;
  for (TensorType& t : in_types)
    if (def.bf16 && t.dtype == DType::bf16) t.dtype = DType::f32, lower = true;
  try {
    n.outputs = def.infer(n, in_types);
    for (int k = 0; lower && k < int(n.outputs.size()); ++k) {
      const auto& only = def.bf16_outputs;
      if (n.outputs[k].dtype == DType::f32 &&
          (only.empty() || std::find(only.begin(), only.end(), k) != only.end()))
        n.outputs[k].dtype = DType::bf16;
    }
  } catch (const Error& e) {
    LS_FAIL(op, (name.empty() ? "" : " '" + name + "'"), ": ", e.what());
  }
  nodes_.push_back(std::move(n));
  std::vector<Value> out;
  for (int i = 0; i < int(nodes_.back().outputs.size()); ++i)
    out.push_back({int(nodes_.size()) - 1, i});
  return out;
}

Value Graph::add(OpId op, std::vector<Value> inputs, Attrs attrs, const std::string& name,
                 VariablePtr var) {
  auto outs = add_multi(op, std::move(inputs), std::move(attrs), name, std::move(var));
  LS_CHECK(!outs.empty(), op, " has no outputs; use add_multi");
  return outs[0];
}

Value Graph::input(const TensorType& type, const std::string& name) {
  Attrs a;
  a.set("shape", type.shape.vec());
  a.set("dtype", std::string(dtype_name(type.dtype)));
  Value v = add(op::input, {}, a, name);
  inputs_.push_back(v.node);
  return v;
}

Value Graph::variable(const VariablePtr& var) {
  for (auto& [p, id] : var_nodes_)
    if (p == var.get()) return {id, 0};
  Value v = add(op::variable, {}, {}, var->name, var);
  var_nodes_.push_back({var.get(), v.node});
  return v;
}

Value Graph::scalar(float v) { return add(op::constant, {}, Attrs{{"value", double(v)}}); }

namespace {
std::atomic<uint64_t>& host_epoch() {
  static std::atomic<uint64_t> epoch{0};
  return epoch;
}
}  // namespace

uint64_t variable_host_epoch() { return host_epoch().load(std::memory_order_acquire); }
void note_variable_host_write() { host_epoch().fetch_add(1, std::memory_order_acq_rel); }

Graph Graph::specialise_batch(int64_t batch) const {
  Graph g;
  g.inputs_ = inputs_;
  g.var_nodes_ = var_nodes_;
  for (const Node& n : nodes_) {
    Node m = n;
    if (m.op == op::input) {
      auto shape = m.attrs.ints("shape");
      if (!shape.empty() && shape[0] < 0) shape[0] = batch;
      m.attrs.set("shape", shape);
    }
    std::vector<TensorType> in_types;
    for (Value v : m.inputs) in_types.push_back(g.type(v));
    try {
      m.outputs = OpRegistry::get().op(m.op).infer(m, in_types);
    } catch (const Error& e) {
      LS_FAIL(m.op, (m.name.empty() ? "" : " '" + m.name + "'"), ": ", e.what());
    }
    g.nodes_.push_back(std::move(m));
  }
  return g;
}

std::string Graph::dump() const {
  std::ostringstream os;
  for (const Node& n : nodes_) {
    os << "%" << n.id << " = " << n.op << "(";
    for (size_t i = 0; i < n.inputs.size(); ++i)
      os << (i ? ", " : "") << "%" << n.inputs[i].node << ":" << n.inputs[i].index;
    os << ") {" << n.attrs.str() << "} ->";
    for (auto& t : n.outputs) os << " " << t.str();
    if (!n.name.empty()) os << "  # " << n.name;
    os << "\n";
  }
  return os.str();
}

}  // namespace lockstep
