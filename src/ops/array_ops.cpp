// Array op registrations: cast, concat, slice (+ slice_grad) and dropout.
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

// Resolved slice extents: size -1 means "to the end" (stays unknown for an unknown dim).
Shape slice_shape(const Node& n, const Shape& x) {
  auto begin = n.attrs.ints("begin"), size = n.attrs.ints("size");
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

}  // namespace

LOCKSTEP_REGISTER(array_ops) {
  add_op({.name = "cast",
          .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 1);
            return Types{{dtype_from_name(n.attrs.s("dtype")), in[0].shape}};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            bool f = b.type(n.inputs[0]).dtype == DType::f32 && n.outputs[0].dtype == DType::f32;
            return Values{f ? dy[0] : Value{}};
          }});

  add_op({.name = "concat",
          .infer = [](const Node& n, const Types& in) {
            LS_CHECK(!in.empty(), "needs at least one input");
            int r = in[0].shape.rank();
            int64_t axis = n.attrs.i("axis", -1);
            if (axis < 0) axis += r;
            LS_CHECK(axis >= 0 && axis < r, "axis ", n.attrs.i("axis", -1), " out of range for rank ", r);
            Shape out = in[0].shape;
            for (size_t k = 1; k < in.size(); ++k) {
              LS_CHECK(in[k].dtype == in[0].dtype, "input ", k, " has dtype ",
                       dtype_name(in[k].dtype), ", expected ", dtype_name(in[0].dtype));
              LS_CHECK(in[k].shape.rank() == r, "input ", k, " has shape ", in[k].shape.str(),
                       ", expected rank ", r);
              for (int i = 0; i < r; ++i) {
                if (i == axis) continue;
                LS_CHECK(in[k].shape[i] == out[i] || in[k].shape[i] < 0 || out[i] < 0, "input ", k,
                         " has shape ", in[k].shape.str(), ", incompatible with ", in[0].shape.str());
                if (out[i] < 0) out[i] = in[k].shape[i];
              }
              out[int(axis)] = (out[int(axis)] < 0 || in[k].shape[int(axis)] < 0)
                                   ? -1 : out[int(axis)] + in[k].shape[int(axis)];
            }
            return Types{{in[0].dtype, out}};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            int r = b.type(n.inputs[0]).shape.rank();
            int64_t axis = n.attrs.i("axis", -1);
            if (axis < 0) axis += r;
            Values out;
            int64_t offset = 0;
            for (Value in : n.inputs) {
              const TensorType& t = b.type(in);
              if (t.dtype != DType::f32) { out.push_back(Value{}); continue; }
              int64_t len = t.shape[int(axis)];
              LS_CHECK(len >= 0, "concat gradient needs a known size on the concat axis");
              std::vector<int64_t> begin(r, 0), size(r, -1);
              begin[axis] = offset;
              size[axis] = len;
              offset += len;
              out.push_back(b.add("slice", {dy[0]}, Attrs{{"begin", begin}, {"size", size}}));
            }
            return out;
          }});

  add_op({.name = "slice",
          .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 1);
            return Types{{in[0].dtype, slice_shape(n, in[0].shape)}};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("slice_grad", {dy[0], n.inputs[0]}, n.attrs)};
          }});
  // (dy, x){begin, size} -> dx: zeros with dy written at the slice.
  add_op({.name = "slice_grad", .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 2);
            Shape s = slice_shape(n, in[1].shape);
            LS_CHECK(s.rank() == in[0].shape.rank(), "dy ", in[0].shape.str(), " does not match ", s.str());
            return Types{f32(in[1].shape)};
          }});

  // dropout(x){rate, seed} -> (y, mask); see docs/ops.md for the RNG keying.
  add_op({.name = "dropout",
          .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 1);
            expect_f32(in[0], "x");
            double rate = n.attrs.f("rate", 0.5);
            LS_CHECK(rate >= 0 && rate < 1, "rate must be in [0, 1), got ", rate);
            return Types{f32(in[0].shape), f32(in[0].shape)};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("mul", {dy[0], Value{n.id, 1}})};
          }});
}

}  // namespace lockstep::ops
