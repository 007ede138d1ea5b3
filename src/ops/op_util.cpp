// Shape helpers for op registrations.
#include "ops/internal/op_util.h"

#include <algorithm>
#include <set>

namespace lockstep::ops {

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  int r = std::max(a.rank(), b.rank());
  Shape out;
  for (int i = 0; i < r; ++i) {
    int ia = i - (r - a.rank()), ib = i - (r - b.rank());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    int64_t d;
    if (da == db)
      d = da;
    else if (da == 1)
      d = db;
    else if (db == 1)
      d = da;
    else if (da < 0 || db < 0)
      d = da < 0 ? db : da;
    else
      LS_FAIL("shapes ", a.str(), " and ", b.str(), " cannot be broadcast together");
    out.push_back(d);
  }
  return out;
}

std::vector<int64_t> normalise_axes(std::vector<int64_t> axes, int rank) {
  for (auto& a : axes) {
    if (a < 0) a += rank;
    LS_CHECK(a >= 0 && a < rank, "axis ", a, " out of range for rank ", rank);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

Attrs attrs_for(OpId to, const Attrs& from) {
  const OpDef& def = OpRegistry::get().op(to);
  Attrs out;
  for (const auto& [key, value] : from.map())
    if (def.attr(key)) out.set(key, value);
  return out;
}

static int64_t axis0(int64_t axis, int rank) { return axis < 0 ? axis + rank : axis; }

bool keeps_rows_off_batch_axis(const Node& n, const std::vector<TensorType>&,
                               const std::vector<bool>&) {
  return axis0(attr_i(n, "axis"), n.outputs[0].shape.rank()) != 0;
}

bool keeps_rows_reduce(const Node& n, const std::vector<TensorType>& in, const std::vector<bool>&) {
  const auto& axes = attr_ints(n, "axes");
  if (axes.empty()) return false;  // all axes
  for (int64_t a : axes)
    if (axis0(a, in[0].shape.rank()) == 0) return false;
  return true;
}

bool keeps_rows_concat(const Node& n, const std::vector<TensorType>&,
                       const std::vector<bool>& rows) {
  if (axis0(attr_i(n, "axis"), n.outputs[0].shape.rank()) == 0) return false;
  return std::all_of(rows.begin(), rows.end(), [](bool r) { return r; });
}

bool keeps_rows_view(const Node&, const std::vector<TensorType>& in,
                     const std::vector<bool>& rows) {
  return rows[0] && in[0].shape.rank() >= 1;
}

bool keeps_rows_slice(const Node& n, const std::vector<TensorType>&, const std::vector<bool>&) {
  const auto& begin = attr_ints(n, "begin");
  return !begin.empty() && begin[0] == 0;
}

bool keeps_rows_pad(const Node& n, const std::vector<TensorType>&, const std::vector<bool>& rows) {
  const auto &before = attr_ints(n, "before"), &after = attr_ints(n, "after");
  return rows[0] && !before.empty() && before[0] == 0 && after[0] == 0;
}

bool keeps_rows_matmul(const Node& n, const std::vector<TensorType>& in,
                       const std::vector<bool>& rows) {
  const int ra = in[0].shape.rank(), rb = in[1].shape.rank();
  if (attr_b(n, "transpose_a") || !rows[0] || ra < 2) return false;
  return !rows[1] ? rb == 2 || in[1].shape[0] == 1 : ra >= 3 && rb >= 3;
}

// dy through node n's fused activation: the activation op's own gradient, which reads only its
// output (kFuseGradFromOutput), here n's output. An error for one whose gradient needs the value
// before the activation, which the fused node does not keep.
Value fused_activation_grad(GradBuilder& b, const Node& n, Value dy) {
  const FusedActivation a = attr_activation(n);
  if (a == FusedActivation::linear) return dy;
  const OpDef* act = OpRegistry::get().fused_activation_op(a);
  LS_CHECK(act && (act->fusion & kFuseGradFromOutput), n.op, " '", n.name, "': activation ",
           fused_activation_name(a),
           " is an inference fusion (its gradient needs the output before the activation, which "
           "the fused node does not keep); differentiate the unfused ",
           n.op, " -> ", fused_activation_name(a), " instead");
  Node as_activation;  // the activation op, as if it had written n's output
  as_activation.id = n.id;
  as_activation.op = act->name;
  return act->grad(b, as_activation, {dy})[0];
}

}  // namespace lockstep::ops
