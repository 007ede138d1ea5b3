// Reduction op declarations: reduce_*, broadcast_to, bias_add, softmax and log_softmax.
// reduce_* {axes, keepdims}: a missing or empty `axes` reduces over every axis.
#include <array>

#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

constexpr const char* kGroup = "reduction";

std::vector<int64_t> reduce_axes(const Node& n, int rank) {
  std::vector<int64_t> axes = attr_ints(n, "axes");
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
    if (!red)
      out.push_back(s[i]);
    else if (keepdims)
      out.push_back(1);
  }
  return out;
}

Types reduce_infer(const Node& n, const Types& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "x");
  return {
      f32(reduced_shape(in[0].shape, reduce_axes(n, in[0].shape.rank()), attr_b(n, "keepdims")))};
}

// (dy, x[, y]) -> dx shaped like x.
Types reduce_grad_infer(const Node& n, const Types& in) {
  LS_CHECK(in.size() == 2 || in.size() == 3, "expected 2 or 3 inputs, got ", in.size());
  Shape want =
      reduced_shape(in[1].shape, reduce_axes(n, in[1].shape.rank()), attr_b(n, "keepdims"));
  LS_CHECK(in[0].shape.rank() == want.rank(), "dy ", in[0].shape.str(), " does not match ",
           want.str());
  return {f32(in[1].shape)};
}

int softmax_axis(const Node& n, int rank) {
  int64_t a = attr_i(n, "axis");
  if (a < 0) a += rank;
  LS_CHECK(a >= 0 && a < rank, "axis ", attr_i(n, "axis"), " out of range for rank ", rank);
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

Types bias_add_infer(const Node&, const Types& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "x");
  expect_f32(in[1], "bias");
  LS_CHECK(in[0].shape.rank() >= 1 && in[1].shape.rank() == 1,
           "expected x[..., C] and bias[C], got ", in[0].shape.str(), " and ", in[1].shape.str());
  LS_CHECK(in[0].shape[-1] == in[1].shape[0] || in[0].shape[-1] < 0, "bias ", in[1].shape.str(),
           " does not match channels of ", in[0].shape.str());
  return {in[0]};
}

const std::vector<AttrDecl> kReduceAttrs = {
    {"axes", i64_list, Ints{}, "axes to reduce; negative from the end; [] = all"},
    {"keepdims", boolean, false, "keep reduced axes as size 1"}};
// reduce_sum/reduce_mean and their gradients: the 4-D side may be blocked over channels.
std::vector<AttrDecl> sum_mean_attrs() {
  std::vector<AttrDecl> a = kReduceAttrs;
  a.push_back({"layout", str, "nhwc",
               "the 4-D tensor's memory layout (x; dx for the gradient): \"nhwc\", or "
               "\"nChw16c\" where the cpu backend's layout pass sets it (axes [0, 1, 2] or "
               "[1, 2] only)"});
  return a;
}
const std::vector<AttrDecl> kAxisAttr = {{"axis", i64, -1, "the axis to normalise along"}};

void register_reductions() {
  const std::array<std::array<OpId, 2>, 2> sum_mean = {
      {{op::reduce_sum, op::reduce_sum_grad}, {op::reduce_mean, op::reduce_mean_grad}}};
  for (const auto& pair : sum_mean) {
    const OpId fwd = pair[0], grad_op = pair[1];  // (clang: no capture of bindings)
    const std::string op = fwd, kind = op.substr(7);
    add_op(kGroup, {.name = fwd,
                    .signature = "(x) -> y",
                    .doc = "The " + kind + " of x over `axes`.",
                    .attrs = sum_mean_attrs(),
                    .infer = reduce_infer,
                    .grad =
                        [grad_op](GradBuilder& b, const Node& n, const Values& dy) {
                          return Values{b.add(grad_op, {dy[0], n.inputs[0]}, n.attrs)};
                        },
                    .bf16 = true,
                    .rows = RowRule::by_attrs,
                    .keeps_rows = keeps_rows_reduce,
                    .onnx = {.op = fwd == op::reduce_sum ? "ReduceSum" : "ReduceMean"}});
    add_op(kGroup, {.name = grad_op,
                    .signature = "(dy, x) -> dx",
                    .doc = "Gradient of " + op + ": dy broadcast back over the reduced axes" +
                           (kind == "mean" ? ", divided by their size." : "."),
                    .attrs = sum_mean_attrs(),
                    .infer = reduce_grad_infer,
                    .bf16 = true,
                    .onnx = {.none = kOnnxGradient}});
  }
  const char* why = "max-reductions (GlobalMaxPooling) are not on the usual training hot path";
  add_op(kGroup, {.name = op::reduce_max,
                  .signature = "(x) -> y",
                  .doc = "The maximum of x over `axes`.",
                  .attrs = kReduceAttrs,
                  .infer = reduce_infer,
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return Values{b.add(op::reduce_max_grad,
                                            {dy[0], n.inputs[0], Value{n.id, 0}}, n.attrs)};
                      },
                  .reference_only = why,
                  .bf16 = true,
                  .rows = RowRule::by_attrs,
                  .keeps_rows = keeps_rows_reduce,
                  .onnx = {.op = "ReduceMax"}});
  add_op(kGroup,
         {.name = op::reduce_max_grad,
          .signature = "(dy, x, y) -> dx",
          .doc = "Gradient of reduce_max: dy goes to the maxima, split evenly between ties.",
          .attrs = kReduceAttrs,
          .infer = reduce_grad_infer,
          .reference_only = why,
          .bf16 = true,
          .onnx = {.none = kOnnxGradient}});
}

void register_broadcasts() {
  add_op(
      kGroup,
      {.name = op::broadcast_to,
       .signature = "(x) -> y",
       .doc = "x repeated to `shape` (numpy broadcasting).",
       .attrs = {{"shape", i64_list, required, "the target dims"}},
       .infer =
           [](const Node& n, const Types& in) {
             expect_inputs(in, 1);
             Shape target(attr_ints(n, "shape"));
             Shape b = broadcast_shapes(in[0].shape, target);
             LS_CHECK(b == target, "cannot broadcast ", in[0].shape.str(), " to ", target.str());
             return Types{{in[0].dtype, target}};
           },
       .grad = [](GradBuilder& b, const Node& n,
                  const Values& dy) { return Values{b.sum_to(dy[0], b.type(n.inputs[0]).shape)}; },
       .reference_only = "a strided copy, used once per step to weight the "
                         "per-example losses",
       .bf16 = true,
       .rows = RowRule::by_attrs,
       .keeps_rows = keeps_rows_view,
       .onnx = {.op = "Expand"}});
  add_op(kGroup, {.name = op::bias_add,
                  .signature = "(x[..., C], bias[C]) -> y",
                  .doc = "x + bias along the last axis.",
                  .infer = bias_add_infer,
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        int r = b.type(n.inputs[0]).shape.rank();
                        std::vector<int64_t> axes;
                        for (int i = 0; i < r - 1; ++i) axes.push_back(i);
                        Value db = r == 1 ? dy[0]
                                          : b.add(op::reduce_sum, {dy[0]},
                                                  Attrs{{"axes", axes}, {"keepdims", false}});
                        return Values{dy[0], db};
                      },
                  .bf16 = true,
                  .rows = RowRule::pointwise,
                  .fusion = kFuseBias,
                  .onnx = {.op = "Add"}});
}

void register_softmax() {
  add_op(kGroup, {.name = op::softmax,
                  .signature = "(x) -> y",
                  .doc = "exp(x) / sum(exp(x)) along `axis` (max-subtracted).",
                  .attrs = kAxisAttr,
                  .infer = softmax_infer,
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return Values{b.add(op::softmax_grad, {dy[0], Value{n.id, 0}}, n.attrs)};
                      },
                  .rows = RowRule::by_attrs,
                  .keeps_rows = keeps_rows_off_batch_axis,
                  .keras_activations = {"softmax"},
                  .onnx = {.op = "Softmax"}});
  add_op(kGroup, {.name = op::softmax_grad,
                  .signature = "(dy, y) -> dx",
                  .doc = "Gradient of softmax: y * (dy - sum(dy * y)).",
                  .attrs = kAxisAttr,
                  .infer = softmax_grad_infer,
                  .onnx = {.none = kOnnxGradient}});
  add_op(kGroup,
         {.name = op::log_softmax,
          .signature = "(x) -> y",
          .doc = "x - logsumexp(x) along `axis`.",
          .attrs = kAxisAttr,
          .infer = softmax_infer,
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return Values{b.add(op::log_softmax_grad, {dy[0], Value{n.id, 0}}, n.attrs)};
              },
          .rows = RowRule::by_attrs,
          .keeps_rows = keeps_rows_off_batch_axis,
          .keras_activations = {"log_softmax"},
          .onnx = {.op = "LogSoftmax"}});
  add_op(kGroup, {.name = op::log_softmax_grad,
                  .signature = "(dy, y) -> dx",
                  .doc = "Gradient of log_softmax: dy - exp(y) * sum(dy).",
                  .attrs = kAxisAttr,
                  .infer = softmax_grad_infer,
                  .onnx = {.none = kOnnxGradient}});
}

}  // namespace

LOCKSTEP_REGISTER(reduce_ops) {
  register_reductions();
  register_broadcasts();
  register_softmax();
}

}  // namespace lockstep::ops
