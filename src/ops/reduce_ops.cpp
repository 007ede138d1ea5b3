// Reduction op registrations: reduce_*, broadcast_to, bias_add, softmax and log_softmax.
// reduce_* {axes, keepdims}: a missing or empty `axes` reduces over every axis.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

std::vector<int64_t> reduce_axes(const Node& n, int rank) {
  std::vector<int64_t> axes = n.attrs.ints("axes", {});
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  return normalise_axes(axes, rank);
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& axes, bool keepdims) {
  Shape out;
  size_t k = 0;
  for (int i = 0; i < s.rank(); ++i) {
    bool red = k < axes.size() && axes[k] == i;
    if (red) ++k;
    if (!red) out.push_back(s[i]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

Types reduce_infer(const Node& n, const Types& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "x");
  return {f32(reduced_shape(in[0].shape, reduce_axes(n, in[0].shape.rank()),
                            n.attrs.b("keepdims", false)))};
}

// (dy, x[, y]) -> dx shaped like x.
Types reduce_grad_infer(const Node& n, const Types& in) {
  LS_CHECK(in.size() == 2 || in.size() == 3, "expected 2 or 3 inputs, got ", in.size());
  Shape want = reduced_shape(in[1].shape, reduce_axes(n, in[1].shape.rank()),
                             n.attrs.b("keepdims", false));
  LS_CHECK(in[0].shape.rank() == want.rank(), "dy ", in[0].shape.str(), " does not match ",
           want.str());
  return {f32(in[1].shape)};
}

int softmax_axis(const Node& n, int rank) {
  int64_t a = n.attrs.i("axis", -1);
  if (a < 0) a += rank;
  LS_CHECK(a >= 0 && a < rank, "axis ", n.attrs.i("axis", -1), " out of range for rank ", rank);
  return int(a);
}

Types softmax_infer(const Node& n, const Types& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "x");
  softmax_axis(n, in[0].shape.rank());
  return {in[0]};
}

Types softmax_grad_infer(const Node& n, const Types& in) {
  expect_inputs(in, 2);
  LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and y ", in[1].shape.str(),
           " must have the same shape");
  softmax_axis(n, in[0].shape.rank());
  return {f32(in[0].shape)};
}

}  // namespace

LOCKSTEP_REGISTER(reduce_ops) {
  for (std::string op : {"reduce_sum", "reduce_mean"}) {
    add_op({.name = op, .infer = reduce_infer,
            .grad = [op](GradBuilder& b, const Node& n, const Values& dy) {
              return Values{b.add(op + "_grad", {dy[0], n.inputs[0]}, n.attrs)};
            }});
    // (dy, x) -> dx: dy broadcast back over the reduced axes (divided by the count for mean).
    add_op({.name = op + "_grad", .infer = reduce_grad_infer});
  }
  add_op({.name = "reduce_max", .infer = reduce_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("reduce_max_grad", {dy[0], n.inputs[0], Value{n.id, 0}}, n.attrs)};
          }});
  add_op({.name = "reduce_max_grad", .infer = reduce_grad_infer});

  add_op({.name = "broadcast_to",
          .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 1);
            Shape target(n.attrs.ints("shape"));
            Shape b = broadcast_shapes(in[0].shape, target);
            LS_CHECK(b == target, "cannot broadcast ", in[0].shape.str(), " to ", target.str());
            return Types{{in[0].dtype, target}};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.sum_to(dy[0], b.type(n.inputs[0]).shape)};
          }});

  add_op({.name = "bias_add",
          .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            expect_f32(in[0], "x");
            expect_f32(in[1], "bias");
            LS_CHECK(in[0].shape.rank() >= 1 && in[1].shape.rank() == 1,
                     "expected x[..., C] and bias[C], got ", in[0].shape.str(), " and ",
                     in[1].shape.str());
            LS_CHECK(in[0].shape[-1] == in[1].shape[0] || in[0].shape[-1] < 0,
                     "bias ", in[1].shape.str(), " does not match channels of ",
                     in[0].shape.str());
            return Types{in[0]};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            int r = b.type(n.inputs[0]).shape.rank();
            std::vector<int64_t> axes;
            for (int i = 0; i < r - 1; ++i) axes.push_back(i);
            Value db = r == 1 ? dy[0]
                              : b.add("reduce_sum", {dy[0]}, Attrs{{"axes", axes}, {"keepdims", false}});
            return Values{dy[0], db};
          }});

  add_op({.name = "softmax", .infer = softmax_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("softmax_grad", {dy[0], Value{n.id, 0}}, n.attrs)};
          }});
  add_op({.name = "softmax_grad", .infer = softmax_grad_infer});  // y * (dy - sum(dy * y))
  add_op({.name = "log_softmax", .infer = softmax_infer,
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("log_softmax_grad", {dy[0], Value{n.id, 0}}, n.attrs)};
          }});
  add_op({.name = "log_softmax_grad", .infer = softmax_grad_infer});  // dy - exp(y) * sum(dy)
}

}  // namespace lockstep::ops
