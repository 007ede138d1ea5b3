// Reverse-mode autodiff: walk nodes backwards from the loss, call each op's gradient builder,
// accumulate gradients with op::add.
#include "lockstep/graph/autodiff.h"

#include <map>

#include "lockstep/graph/op_registry.h"

namespace lockstep {

Value GradBuilder::sum_to(Value grad, const Shape& shape) {
  const Shape& gs = type(grad).shape;
  if (gs == shape) return grad;
  // Axes to reduce: leading extra dims, and dims where target is 1 but grad is not.
  std::vector<int64_t> axes;
  int lead = gs.rank() - shape.rank();
  for (int i = 0; i < gs.rank(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && gs[i] != 1)) axes.push_back(i);
  }
  Value r = grad;
  if (!axes.empty()) r = add(op::reduce_sum, {grad}, Attrs{{"axes", axes}, {"keepdims", true}});
  if (type(r).shape != shape) r = add(op::reshape, {r}, Attrs{{"shape", shape.vec()}});
  return r;
}

std::vector<Value> gradients(Graph& g, Value loss, const std::vector<Value>& wrt) {
  LS_CHECK(g.type(loss).shape.numel() == 1, "gradients: loss must be a scalar, got ",
           g.type(loss).shape.str());
  int last = loss.node;
  // Which nodes lie on a path to the loss (only those need gradients).
  std::vector<char> needed(last + 1, 0);
  needed[last] = 1;
  for (int i = last; i >= 0; --i) {
    if (!needed[i]) continue;
    for (Value v : g.node(i).inputs) needed[v.node] = 1;
  }
  // ... and that depend on a `wrt` value: no gradient flows into the rest (the layers in front
  // of the first trained weight, e.g. a frozen backbone under a new head), so none is built.
  std::vector<char> depends(last + 1, 0);
  for (Value w : wrt)
    if (w.node <= last) depends[w.node] = 1;
  // stop_gradient passes none by definition, and zeros_like / ones_like read their input's shape
  // alone (a position table broadcast to x's shape as zeros_like(x) + table).
  for (int i = 0; i <= last; ++i) {
    const OpId op = g.node(i).op;
    if (depends[i] || !needed[i] || op == op::stop_gradient || op == op::zeros_like ||
        op == op::ones_like)
      continue;
    for (Value v : g.node(i).inputs) depends[i] |= depends[v.node];
  }
  for (int i = 0; i <= last; ++i) needed[i] &= depends[i];
  std::map<std::pair<int, int>, Value> grad;
  GradBuilder b(g);
  grad[{loss.node, loss.index}] = g.add(op::ones_like, {loss});
  for (int i = last; i >= 0; --i) {
    if (!needed[i]) continue;
    const Node node = g.node(i);  // copy: g grows while we differentiate
    const OpDef& def = OpRegistry::get().op(node.op);
    std::vector<Value> dys(node.outputs.size());
    bool any = false;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      auto it = grad.find({i, int(k)});
      if (it != grad.end()) {
        dys[k] = it->second;
        any = true;
      }
    }
    if (!any || node.inputs.empty()) continue;
    if (!def.grad) {
      bool float_input = false;
      for (Value v : node.inputs) float_input |= g.type(v).dtype == DType::f32 && needed[v.node];
      LS_CHECK(!float_input || node.op == op::stop_gradient, "op '", node.op, "' (", node.name,
               ") has no gradient; it cannot sit between the weights and the loss");
      continue;
    }
    // Missing output grads become zeros so grad functions can assume all are set.
    for (size_t k = 0; k < dys.size(); ++k)
      if (!dys[k].valid()) dys[k] = g.add(op::zeros_like, {Value{i, int(k)}});
    b.set_name(node.name.empty() ? "" : node.name + "/grad");
    std::vector<Value> dxs = def.grad(b, node, dys);
    LS_CHECK(dxs.size() <= node.inputs.size(), "gradient of '", node.op,
             "' returned too many values");
    for (size_t k = 0; k < dxs.size(); ++k) {
      if (!dxs[k].valid()) continue;
      Value x = node.inputs[k];
      LS_CHECK(g.type(dxs[k]).shape == g.type(x).shape, "gradient of '", node.op, "' input ", k,
               " has shape ", g.type(dxs[k]).shape.str(), ", expected ", g.type(x).shape.str());
      auto key = std::make_pair(x.node, x.index);
      auto it = grad.find(key);
      if (it == grad.end())
        grad[key] = dxs[k];
      else
        it->second = g.add(op::add, {it->second, dxs[k]});
    }
  }
  std::vector<Value> out;
  for (Value w : wrt) {
    auto it = grad.find({w.node, w.index});
    out.push_back(it != grad.end() ? it->second : g.add(op::zeros_like, {w}));
  }
  return out;
}

}  // namespace lockstep
