// The lowering registry and the LoweringContext's helpers (see lowering.h).
#include "backends/xla/lowering.h"

#include <algorithm>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>

#include "lockstep/core/error.h"

namespace lockstep::xla {

namespace {

std::map<OpId, LowerFn>& registry() {
  static std::map<OpId, LowerFn> r;
  return r;
}

std::string node_text(const Node& n) {
  return n.op + (n.name.empty() ? "" : " '" + n.name + "'") + " (node " + std::to_string(n.id) +
         ")";
}

}  // namespace

void register_lowering(OpId op, LowerFn fn) {
  LS_CHECK(!registry().count(op), "xla: op '", op, "' has two lowerings");
  registry()[op] = std::move(fn);
}

const LowerFn* find_lowering(OpId op) {
  auto it = registry().find(op);
  return it == registry().end() ? nullptr : &it->second;
}

std::vector<int64_t> all_axes(int rank) {
  std::vector<int64_t> v;
  for (int i = 0; i < rank; ++i) v.push_back(i);
  return v;
}

std::vector<int64_t> node_axes(const Node& n, int rank) {
  std::vector<int64_t> axes = n.attrs.ints("axes", {});
  if (axes.empty()) return all_axes(rank);
  for (int64_t& a : axes) {
    if (a < 0) a += rank;
    LS_CHECK(a >= 0 && a < rank, node_text(n), ": axis out of range for rank ", rank);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

// ---- inputs and variables ----

HloValue LoweringContext::raw(const Node& n, int i) const {
  const Value v = n.inputs.at(size_t(i));
  auto it = values.find({v.node, v.index});
  LS_CHECK(it != values.end(), "xla: input ", i, " of ", node_text(n), " was not lowered");
  return it->second;
}

HloValue LoweringContext::in(const Node& n, int i) const {
  HloValue v = raw(n, i);
  if (v.type.elem == ElemType::bf16 || v.type.elem == ElemType::f16)
    return b.convert(v, ElemType::f32);
  return v;
}

std::pair<HloValue, HloValue> LoweringContext::contraction_operands(const Node& n, int i,
                                                                    int j) const {
  HloValue a = raw(n, i), b = raw(n, j);
  if (a.type.elem == ElemType::bf16 && b.type.elem == ElemType::bf16) return {a, b};
  return {in(n, i), in(n, j)};
}

HloValue LoweringContext::gradient(const Node& n, int i) {
  HloValue g = in(n, i);
  if (num_replicas <= 1 || !mean_gradients) return g;
  std::vector<int64_t> all;
  for (int r = 0; r < num_replicas; ++r) all.push_back(r);
  HloValue sum = b.all_reduce(g, {all}, Reducer::add);
  return b.multiply(sum, full_like(sum, 1.0 / num_replicas));
}

const Variable* LoweringContext::variable_of(const Node& n, int i) const {
  const Node& src = graph.node(n.inputs.at(size_t(i)).node);
  LS_CHECK(src.op == op::variable && src.variable, "xla: input ", i, " of ", node_text(n),
           " must be a variable read (got ", src.op, ")");
  return src.variable.get();
}

HloValue LoweringContext::variable_value(const Node& n, int i) const {
  auto it = variable_values.find(variable_of(n, i));
  LS_CHECK(it != variable_values.end(), "xla: variable of ", node_text(n), " has no argument");
  HloValue v = it->second;
  if (v.type.elem == ElemType::bf16) return b.convert(v, ElemType::f32);
  return v;
}

void LoweringContext::update_variable(const Node& n, int i, const HloValue& value) {
  const Variable* var = variable_of(n, i);
  HloValue& slot = variable_values.at(var);
  HloValue v = b.convert(value, slot.type.elem);
  if (v.type.dims != slot.type.dims) v = b.reshape(v, slot.type.dims);
  if (std::find(updated.begin(), updated.end(), var) == updated.end()) updated.push_back(var);
  slot = v;
}

// ---- helpers ----

HloValue LoweringContext::full(const HloType& type, double value) {
  HloValue s = b.scalar(type.elem, value);
  if (type.dims.empty()) return s;
  return b.broadcast_in_dim(s, type.dims, {});
}

HloValue LoweringContext::broadcast_numpy(const HloValue& x, const std::vector<int64_t>& dims) {
  const int r = x.type.rank(), R = int(dims.size());
  LS_CHECK(r <= R, "xla: cannot broadcast ", x.type.str(), " to rank ", R);
  std::vector<int64_t> bd;
  for (int i = 0; i < r; ++i) bd.push_back(R - r + i);
  return b.broadcast_in_dim(x, dims, bd);
}

std::pair<HloValue, HloValue> LoweringContext::broadcast_pair(const HloValue& a,
                                                              const HloValue& c) {
  const int R = std::max(a.type.rank(), c.type.rank());
  std::vector<int64_t> dims(size_t(R), 1);
  for (const HloValue* v : {&a, &c})
    for (int i = 0; i < v->type.rank(); ++i) {
      int64_t d = v->type.dims[size_t(i)];
      int64_t& o = dims[size_t(R - v->type.rank() + i)];
      LS_CHECK(o == 1 || d == 1 || o == d, "xla: shapes ", a.type.str(), " and ", c.type.str(),
               " do not broadcast");
      if (d != 1) o = d;
    }
  return {broadcast_numpy(a, dims), broadcast_numpy(c, dims)};
}

HloValue LoweringContext::reduce_sum(const HloValue& x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  return b.reduce(x, b.scalar(x.type.elem, 0.0), axes, Reducer::add);
}

HloValue LoweringContext::reduce_max(const HloValue& x, const std::vector<int64_t>& axes) {
  if (axes.empty()) return x;
  return b.reduce(x, b.scalar(x.type.elem, -std::numeric_limits<double>::infinity()), axes,
                  Reducer::max);
}

HloValue LoweringContext::expand_back(const HloValue& x, const std::vector<int64_t>& dims,
                                      const std::vector<int64_t>& axes) {
  std::vector<int64_t> kept;
  for (int i = 0; i < int(dims.size()); ++i)
    if (std::find(axes.begin(), axes.end(), i) == axes.end()) kept.push_back(i);
  return b.broadcast_in_dim(x, dims, kept);
}

}  // namespace lockstep::xla
