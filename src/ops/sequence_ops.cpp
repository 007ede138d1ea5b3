// Sequence op declarations (issue 35): gather (embedding lookup) and its scatter-add gradient,
// one_hot, the comparisons and logical ops (uint8 0/1, the graph's bool), where, reverse and
// cumsum.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;
constexpr const char* kGroup = "sequence";

bool is_index(DType t) { return t == DType::i32 || t == DType::i64; }

int64_t norm_axis(int64_t axis, int rank, const char* what) {
  const int64_t a = axis < 0 ? axis + rank : axis;
  LS_CHECK(a >= 0 && a < rank, what, " ", axis, " out of range for rank ", rank);
  return a;
}

// gather: table.shape[:axis] + ids.shape + table.shape[axis+1:].
Types gather_infer(const Node& n, const Types& in) {
  expect_inputs(in, 2);
  LS_CHECK(is_float(in[0].dtype), "table must be float32 or bfloat16, got ",
           dtype_name(in[0].dtype));
  LS_CHECK(is_index(in[1].dtype), "ids must be int32 or int64, got ", dtype_name(in[1].dtype),
           " (cast float ids with \"cast\" first, as Embedding does)");
  const Shape& t = in[0].shape;
  LS_CHECK(t.rank() >= 1, "table must have rank >= 1, got ", t.str());
  const int64_t axis = norm_axis(attr_i(n, "axis"), t.rank(), "axis");
  Shape out;
  for (int i = 0; i < axis; ++i) out.push_back(t[i]);
  for (int64_t d : in[1].shape) out.push_back(d);
  for (int i = int(axis) + 1; i < t.rank(); ++i) out.push_back(t[i]);
  return {{in[0].dtype, out}};
}

// gather_grad: (dy, ids) -> dtable, dy = dtable.shape[:axis] + ids.shape + dtable.shape[axis+1:].
Types gather_grad_infer(const Node& n, const Types& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "dy");
  LS_CHECK(is_index(in[1].dtype), "ids must be int32 or int64, got ", dtype_name(in[1].dtype));
  const Shape &dy = in[0].shape, &ids = in[1].shape;
  const int64_t axis = attr_i(n, "axis"), size = attr_i(n, "size");
  LS_CHECK(axis >= 0 && axis + ids.rank() <= dy.rank(), "axis ", axis, " and ids ", ids.str(),
           " do not fit dy ", dy.str());
  LS_CHECK(size > 0, "size must be positive, got ", size);
  Shape out;
  for (int i = 0; i < axis; ++i) out.push_back(dy[i]);
  out.push_back(size);
  for (int i = int(axis) + ids.rank(); i < dy.rank(); ++i) out.push_back(dy[i]);
  return {f32(out)};
}

bool gather_keeps_rows(const Node& n, const Types& in, const std::vector<bool>& rows) {
  return attr_i(n, "axis") == 0 && !rows[0] && rows[1] && in[1].shape.rank() >= 1;
}

void register_gather() {
  add_op(kGroup,
         {.name = op::gather,
          .signature = "(table, ids) -> y",
          .doc = "Rows of `table` picked by integer `ids` along `axis` (an embedding lookup: "
                 "table [V, D], ids [...] -> [..., D]). An id outside [0, V) is an error naming "
                 "the node (the layer), the id and the range on reference and cpu, never a read "
                 "outside the table; on xla, where the ids stay on the device, such an id gives "
                 "a row of zeros (as TensorFlow on a GPU), never a clamped row.",
          .attrs = {{"axis", i64, 0, "the table's axis the ids index"}},
          .infer = gather_infer,
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                const Shape& t = b.type(n.inputs[0]).shape;
                const int64_t axis = norm_axis(attr_i(n, "axis"), t.rank(), "axis");
                Value g = b.add(op::gather_grad, {dy[0], n.inputs[1]},
                                Attrs{{"axis", axis}, {"size", t[int(axis)]}});
                return Values{g, Value{}};
              },
          .bf16 = true,
          .rows = RowRule::by_attrs,
          .keeps_rows = gather_keeps_rows,
          .onnx = {.op = "Gather"}});
  add_op(kGroup,
         {.name = op::gather_grad,
          .signature = "(dy, ids) -> dtable",
          .doc = "Gradient of gather, a scatter-add: zeros of the table's shape with each slice of "
                 "dy added at its id (repeated ids add up). The cpu kernel splits the table's "
                 "columns between threads, each adding the ids in order: deterministic.",
          .attrs = {{"axis", i64, 0, "the table's axis the ids index (non-negative)"},
                    {"size", i64, required, "the table's extent on axis"}},
          .infer = gather_grad_infer,
          .bf16 = true,
          .onnx = {.none = kOnnxGradient}});
}

void register_one_hot() {
  add_op(kGroup,
         {.name = op::one_hot,
          .signature = "(ids) -> y",
          .doc = "ids [...] -> [..., depth]: 1 at each id, 0 elsewhere; an id outside [0, depth) "
                 "gives a row of zeros (as tf.one_hot).",
          .attrs = {{"depth", i64, required, "the number of classes"},
                    {"dtype", str, "float32", "float32, bfloat16, int32, int64 or uint8"}},
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                LS_CHECK(is_index(in[0].dtype) || in[0].dtype == DType::u8,
                         "ids must be int32, int64 or uint8, got ", dtype_name(in[0].dtype));
                LS_CHECK(attr_i(n, "depth") > 0, "depth must be positive");
                Shape s = in[0].shape;
                s.push_back(attr_i(n, "depth"));
                return Types{{dtype_from_name(attr_s(n, "dtype")), s}};
              },
          .reference_only = "writes depth values per id: a memory fill, not a hot path",
          .rows = RowRule::per_row,
          .onnx = {.op = "OneHot"}});
}

Types compare_infer(const Node&, const Types& in) {
  expect_inputs(in, 2);
  LS_CHECK(in[0].dtype == in[1].dtype, "a (", dtype_name(in[0].dtype), ") and b (",
           dtype_name(in[1].dtype), ") must have the same dtype: cast one first");
  return {{DType::u8, broadcast_shapes(in[0].shape, in[1].shape)}};
}

Types logical_infer(const Node&, const Types& in) {
  LS_CHECK(in.size() == 1 || in.size() == 2, "expected 1 or 2 inputs, got ", in.size());
  for (const TensorType& t : in)
    LS_CHECK(t.dtype == DType::u8, "operands must be uint8 (0 = false), got ", dtype_name(t.dtype));
  return {{DType::u8, in.size() == 1 ? in[0].shape : broadcast_shapes(in[0].shape, in[1].shape)}};
}

constexpr const char* kSmallReason =
    "elementwise over masks and ids: small next to the matmuls around it";

void register_comparisons() {
  struct Cmp {
    OpId id;
    const char* what;
    OnnxLowering onnx;
  };
  const Cmp cmps[] = {{op::equal, "a == b", {.op = "Equal"}},
                      {op::not_equal, "a != b", {.recipe = "Not(Equal(a, b))"}},
                      {op::less, "a < b", {.op = "Less"}},
                      {op::less_equal, "a <= b", {.op = "LessOrEqual"}},
                      {op::greater, "a > b", {.op = "Greater"}},
                      {op::greater_equal, "a >= b", {.op = "GreaterOrEqual"}}};
  for (const Cmp& c : cmps)
    add_op(kGroup, {.name = c.id,
                    .signature = "(a, b) -> y",
                    .doc = std::string(c.what) +
                           " elementwise (numpy broadcasting, same dtype): uint8 1 where it "
                           "holds, 0 elsewhere (NaN compares unequal and unordered).",
                    .infer = compare_infer,
                    .reference_only = kSmallReason,
                    .rows = RowRule::pointwise,
                    .onnx = c.onnx});
  const Cmp logic[] = {{op::logical_and, "a and b (nonzero = true)", {.op = "And"}},
                       {op::logical_or, "a or b (nonzero = true)", {.op = "Or"}},
                       {op::logical_not, "not x (nonzero = true)", {.op = "Not"}}};
  for (const Cmp& c : logic)
    add_op(kGroup, {.name = c.id,
                    .signature = c.id == op::logical_not ? "(x) -> y" : "(a, b) -> y",
                    .doc = std::string(c.what) + " elementwise on uint8: 1 or 0.",
                    .infer = logical_infer,
                    .reference_only = kSmallReason,
                    .rows = RowRule::pointwise,
                    .onnx = c.onnx});
}

Types where_infer(const Node&, const Types& in) {
  expect_inputs(in, 3);
  LS_CHECK(in[0].dtype == DType::u8, "cond must be uint8 (0 = false), got ",
           dtype_name(in[0].dtype));
  LS_CHECK(in[1].dtype == in[2].dtype, "a (", dtype_name(in[1].dtype), ") and b (",
           dtype_name(in[2].dtype), ") must have the same dtype");
  Shape s = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), in[2].shape);
  return {{in[1].dtype, s}};
}

// da = dy where cond (summed to a's shape), db = dy elsewhere.
Values where_grad(GradBuilder& b, const Node& n, const Values& dy) {
  if (!is_float(b.type(n.inputs[1]).dtype)) return Values{Value{}, Value{}, Value{}};
  Value zero = b.add(op::zeros_like, {dy[0]});
  Value da = b.add(op::where, {n.inputs[0], dy[0], zero});
  Value db = b.add(op::where, {n.inputs[0], zero, dy[0]});
  return Values{Value{}, b.sum_to(da, b.type(n.inputs[1]).shape),
                b.sum_to(db, b.type(n.inputs[2]).shape)};
}

bool reverse_keeps_rows(const Node& n, const Types& in, const std::vector<bool>& rows) {
  for (int64_t a : normalise_axes(attr_ints(n, "axes"), in[0].shape.rank()))
    if (a == 0) return false;
  return rows[0];
}

bool cumsum_keeps_rows(const Node& n, const Types& in, const std::vector<bool>& rows) {
  const int r = in[0].shape.rank();
  return rows[0] && norm_axis(attr_i(n, "axis"), r, "axis") != 0;
}

const std::vector<AttrDecl> kCumsumAttrs = {
    {"axis", i64, -1, "the axis summed along"},
    {"exclusive", boolean, false, "y[i] sums x[0..i) instead of x[0..i]"},
    {"reverse", boolean, false, "sum from the end: y[i] sums x[i..n)"}};

void register_select_reverse_cumsum() {
  add_op(kGroup, {.name = op::where,
                  .signature = "(cond, a, b) -> y",
                  .doc = "a where cond is nonzero, b elsewhere (numpy broadcasting of all three); "
                         "gradient to a and b.",
                  .infer = where_infer,
                  .grad = where_grad,
                  .reference_only = kSmallReason,
                  .bf16 = true,
                  .rows = RowRule::pointwise,
                  .onnx = {.op = "Where"}});
  add_op(kGroup,
         {.name = op::reverse,
          .signature = "(x) -> y",
          .doc = "x with the order of its elements reversed along each of `axes`.",
          .attrs = {{"axes", i64_list, required, "the axes reversed (negative from the end)"}},
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                normalise_axes(attr_ints(n, "axes"), in[0].shape.rank());
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return Values{b.add(op::reverse, {dy[0]}, attrs_for(op::reverse, n.attrs))};
              },
          .reference_only = "a memory copy, not on the usual training hot path",
          .bf16 = true,
          .rows = RowRule::by_attrs,
          .keeps_rows = reverse_keeps_rows,
          .onnx = {.none = "ONNX has no reverse operator (a Slice with step -1 per axis would "
                           "do; no layer exports one yet)"}});
  add_op(kGroup,
         {.name = op::cumsum,
          .signature = "(x) -> y",
          .doc = "Cumulative sum along `axis` (exclusive and/or reverse as tf.math.cumsum); "
                 "gradient: the cumsum of dy in the other direction.",
          .attrs = kCumsumAttrs,
          .infer =
              [](const Node& n, const Types& in) {
                expect_inputs(in, 1);
                expect_f32(in[0], "x");
                norm_axis(attr_i(n, "axis"), in[0].shape.rank(), "axis");
                return Types{in[0]};
              },
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return Values{b.add(op::cumsum, {dy[0]},
                                    Attrs{{"axis", attr_i(n, "axis")},
                                          {"exclusive", attr_b(n, "exclusive")},
                                          {"reverse", !attr_b(n, "reverse")}})};
              },
          .reference_only = "a running sum along one axis: memory-bound, not a hot path",
          .bf16 = true,
          .rows = RowRule::by_attrs,
          .keeps_rows = cumsum_keeps_rows,
          .onnx = {.op = "CumSum"}});
}

}  // namespace

LOCKSTEP_REGISTER(sequence_ops) {
  register_gather();
  register_one_hot();
  register_comparisons();
  register_select_reverse_cumsum();
}

}  // namespace lockstep::ops
