// Array op declarations: cast, concat, slice (+ slice_grad), pad and dropout.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;
constexpr const char* kGroup = "array";
const char* kCopyReason = "a memory copy, not on the usual training hot path";

// Resolved slice extents: size -1 means "to the end" (stays unknown for an unknown dim).
Shape slice_shape(const Node& n, const Shape& x) {
  const auto &begin = attr_ints(n, "begin"), &size = attr_ints(n, "size");
  LS_CHECK(int(begin.size()) == x.rank() && int(size.size()) == x.rank(), "begin and size need ",
           x.rank(), " entries for input ", x.str());
  Shape out;
  for (int i = 0; i < x.rank(); ++i) {
    LS_CHECK(begin[i] >= 0, "negative begin ", begin[i], " on axis ", i);
    int64_t s = size[i];
    if (x[i] >= 0) {
      if (s < 0) s = x[i] - begin[i];
      LS_CHECK(begin[i] + s <= x[i] && s >= 0, "slice [", begin[i], ", ", begin[i] + s,
               ") out of range on axis ", i, " of ", x.str());
    }
    out.push_back(s);
  }
  return out;
}

Types concat_infer(const Node& n, const Types& in) {
  LS_CHECK(!in.empty(), "needs at least one input");
  int r = in[0].shape.rank();
  int64_t axis = attr_i(n, "axis");
  if (axis < 0) axis += r;
  LS_CHECK(axis >= 0 && axis < r, "axis ", attr_i(n, "axis"), " out of range for rank ", r);
  Shape out = in[0].shape;
  for (size_t k = 1; k < in.size(); ++k) {
    LS_CHECK(in[k].dtype == in[0].dtype, "input ", k, " has dtype ", dtype_name(in[k].dtype),
             ", expected ", dtype_name(in[0].dtype));
    LS_CHECK(in[k].shape.rank() == r, "input ", k, " has shape ", in[k].shape.str(),
             ", expected rank ", r);
    for (int i = 0; i < r; ++i) {
      if (i == axis) continue;
      LS_CHECK(in[k].shape[i] == out[i] || in[k].shape[i] < 0 || out[i] < 0, "input ", k,
               " has shape ", in[k].shape.str(), ", incompatible with ", in[0].shape.str());
      if (out[i] < 0) out[i] = in[k].shape[i];
    }
    out[int(axis)] = (out[int(axis)] < 0 || in[k].shape[int(axis)] < 0)
                         ? -1
                         : out[int(axis)] + in[k].shape[int(axis)];
  }
  return {{in[0].dtype, out}};
}

// Each input's gradient is dy's slice at its offset along the concat axis.
Values concat_grad(GradBuilder& b, const Node& n, const Values& dy) {
  int r = b.type(n.inputs[0]).shape.rank();
  int64_t axis = attr_i(n, "axis");
  if (axis < 0) axis += r;
  Values out;
  int64_t offset = 0;
  for (Value in : n.inputs) {
    const TensorType& t = b.type(in);
    if (t.dtype != DType::f32) {
      out.push_back(Value{});
      continue;
    }
    int64_t len = t.shape[int(axis)];
    LS_CHECK(len >= 0, "concat gradient needs a known size on the concat axis");
    std::vector<int64_t> begin(r, 0), size(r, -1);
    begin[axis] = offset;
    size[axis] = len;
    offset += len;
    out.push_back(b.add(op::slice, {dy[0]}, Attrs{{"begin", begin}, {"size", size}}));
  }
  return out;
}

const std::vector<AttrDecl> kSliceAttrs = {
    {"begin", i64_list, required, "first index on each axis"},
    {"size", i64_list, required, "extent on each axis; -1 = to the end"}};

void register_copies() {
  add_op(kGroup,
         {.name = op::cast,
          .signature = "(x) -> y",
          .doc = "x converted to `dtype` (float to int truncates; to bfloat16 rounds to nearest "
                 "even).",
          .attrs = {{"dtype", str, required, "float32, bfloat16, int32, int64 or uint8"}},
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                return Types{{dtype_from_name(attr_s(n, "dtype")), in[0].shape}};
              },
          // Between float types the gradient is cast back (a bf16 gradient of a cast f32
          // weight arrives in f32); integer ends have none.
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                DType from = b.type(n.inputs[0]).dtype, to = n.outputs[0].dtype;
                if (!is_float(from) || !is_float(to)) return Values{Value{}};
                if (from == to) return Values{dy[0]};
                return Values{
                    b.add(op::cast, {dy[0]}, Attrs{{"dtype", std::string(dtype_name(from))}})};
              },
          .rows = RowRule::pointwise,
          .onnx = {.op = "Cast"}});
  add_op(kGroup, {.name = op::concat,
                  .signature = "(x_1, ..., x_n) -> y",
                  .doc = "The inputs joined along `axis` (same dtype, other dims equal).",
                  .attrs = {{"axis", i64, -1, "the axis to join along"}},
                  .infer = concat_infer,
                  .grad = concat_grad,
                  .reference_only = kCopyReason,
                  .bf16 = true,
                  .rows = RowRule::by_attrs,
                  .keeps_rows = keeps_rows_concat,
                  .onnx = {.op = "Concat"}});
  add_op(kGroup, {.name = op::slice,
                  .signature = "(x) -> y",
                  .doc = "The block of x at `begin` of extent `size`.",
                  .attrs = kSliceAttrs,
                  .infer =
                      [](const Node& n, const Types& in) {
                        expect_inputs(in, 1);
                        return Types{{in[0].dtype, slice_shape(n, in[0].shape)}};
                      },
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return Values{b.add(op::slice_grad, {dy[0], n.inputs[0]}, n.attrs)};
                      },
                  .reference_only = kCopyReason,
                  .bf16 = true,
                  .rows = RowRule::by_attrs,
                  .keeps_rows = keeps_rows_slice,
                  .onnx = {.op = "Slice"}});
  add_op(kGroup, {.name = op::slice_grad,
                  .signature = "(dy, x) -> dx",
                  .doc = "Gradient of slice: zeros of x's shape with dy written at the slice.",
                  .attrs = kSliceAttrs,
                  .infer =
                      [](const Node& n, const Types& in) {
                        expect_inputs(in, 2);
                        Shape s = slice_shape(n, in[1].shape);
                        LS_CHECK(s.rank() == in[0].shape.rank(), "dy ", in[0].shape.str(),
                                 " does not match ", s.str());
                        return Types{f32(in[1].shape)};
                      },
                  .reference_only = kCopyReason,
                  .bf16 = true,
                  .onnx = {.none = kOnnxGradient}});
}

// pad: zeros added `before` and `after` each axis (ZeroPadding2D); its gradient is the slice
// of dy that x came from.
void register_pad() {
  add_op(kGroup,
         {.name = op::pad,
          .signature = "(x) -> y",
          .doc = "x with before[i] zeros ahead of and after[i] zeros behind it on axis i.",
          .attrs = {{"before", i64_list, required, "zeros ahead of x on each axis"},
                    {"after", i64_list, required, "zeros behind x on each axis"}},
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                const auto &b = attr_ints(n, "before"), &a = attr_ints(n, "after");
                const Shape& x = in[0].shape;
                LS_CHECK(int(b.size()) == x.rank() && int(a.size()) == x.rank(),
                         "before and after need ", x.rank(), " entries for input ", x.str());
                Shape out;
                for (int i = 0; i < x.rank(); ++i) {
                  LS_CHECK(b[i] >= 0 && a[i] >= 0, "negative padding on axis ", i);
                  out.push_back(x[i] < 0 ? -1 : x[i] + b[i] + a[i]);
                }
                return Types{{in[0].dtype, out}};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                const Shape& x = b.type(n.inputs[0]).shape;
                std::vector<int64_t> size(x.vec());
                for (auto& s : size) s = s < 0 ? -1 : s;
                return Values{b.add(op::slice, {dy[0]},
                                    Attrs{{"begin", attr_ints(n, "before")}, {"size", size}})};
              },
          .reference_only = kCopyReason,
          .bf16 = true,
          .rows = RowRule::by_attrs,
          .keeps_rows = keeps_rows_pad,
          .onnx = {.op = "Pad"}});
}

void register_dropout() {
  add_op(kGroup, {.name = op::dropout,
                  .signature = "(x) -> (y, mask)",
                  .doc = "y = x * mask, mask in {0, 1/(1-rate)} drawn from Philox keyed by (seed, "
                         "node id, replica, model seed) with counter = step; gradient dy * mask.",
                  .attrs = {{"rate", f64, 0.5, "the fraction dropped, in [0, 1)"},
                            {"seed", i64, 0, "part of the random key"}},
                  .infer =
                      [](const Node& n, const Types& in) {
                        expect_inputs(in, 1);
                        expect_f32(in[0], "x");
                        double rate = attr_f(n, "rate");
                        LS_CHECK(rate >= 0 && rate < 1, "rate must be in [0, 1), got ", rate);
                        return Types{f32(in[0].shape), f32(in[0].shape)};
                      },
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return Values{b.add(op::mul, {dy[0], Value{n.id, 1}})};
                      },
                  .bf16 = true,
                  .onnx = {.op = "Dropout"}});
}

}  // namespace

LOCKSTEP_REGISTER(array_ops) {
  register_copies();
  register_pad();
  register_dropout();
}

}  // namespace lockstep::ops
