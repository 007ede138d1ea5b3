// Layout op declarations: transpose (any permutation of the axes).
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

// The node's perm checked against rank r: every axis in [0, r) exactly once (negative entries
// count from the end).
std::vector<int64_t> checked_perm(const Node& n, int r) {
  std::vector<int64_t> perm = attr_ints(n, "perm");
  LS_CHECK(int(perm.size()) == r, "perm has ", perm.size(), " entries, the input has rank ", r,
           ": give one entry per axis");
  std::vector<bool> seen(size_t(r), false);
  for (auto& p : perm) {
    if (p < 0) p += r;
    LS_CHECK(p >= 0 && p < r, "perm entry ", p, " out of range for rank ", r);
    LS_CHECK(!seen[size_t(p)], "perm names axis ", p, " twice: it must be a permutation");
    seen[size_t(p)] = true;
  }
  return perm;
}

Types transpose_infer(const Node& n, const Types& in) {
  expect_inputs(in, 1);
  const Shape& x = in[0].shape;
  const std::vector<int64_t> perm = checked_perm(n, x.rank());
  Shape out;
  for (int64_t p : perm) out.push_back(x[int(p)]);
  return {{in[0].dtype, out}};
}

// dx = transpose(dy, inverse(perm)).
Values transpose_grad(GradBuilder& b, const Node& n, const Values& dy) {
  const std::vector<int64_t> perm = checked_perm(n, b.type(n.inputs[0]).shape.rank());
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[size_t(perm[i])] = int64_t(i);
  return {b.add(op::transpose, {dy[0]}, Attrs{{"perm", inv}})};
}

// Rows stay apart when the batch axis stays first.
bool keeps_rows_transpose(const Node& n, const Types& in, const std::vector<bool>& rows) {
  if (rows.empty() || !rows[0]) return false;
  const auto& perm = attr_ints(n, "perm");
  return !perm.empty() && (perm[0] == 0 || perm[0] == -int64_t(in[0].shape.rank()));
}

}  // namespace

LOCKSTEP_REGISTER(layout_ops) {
  add_op("array", {.name = op::transpose,
                   .signature = "(x) -> y",
                   .doc = "x with its axes permuted: y's axis i is x's axis perm[i] (numpy "
                          "transpose, keras.ops.transpose, Keras's Permute with the batch axis).",
                   .attrs = {{"perm", i64_list, required,
                              "a permutation of x's axes (negative entries count from the end)"}},
                   .infer = transpose_infer,
                   .grad = transpose_grad,
                   .bf16 = true,
                   .rows = RowRule::by_attrs,
                   .keeps_rows = keeps_rows_transpose,
                   .onnx = {.op = "Transpose"}});
}

}  // namespace lockstep::ops
