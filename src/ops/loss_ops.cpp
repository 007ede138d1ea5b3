// Loss and metric op registrations (per-example outputs; train/ composes the reductions).
// Class axis is the last one: logits[..., C]; sparse labels (i32, or f32 holding integers)
// have the leading shape [...] (a trailing 1 is accepted too).
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

Shape leading(const Shape& s) {
  Shape out;
  for (int i = 0; i + 1 < s.rank(); ++i) out.push_back(s[i]);
  return out;
}

bool dims_match(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int i = 0; i < a.rank(); ++i)
    if (a[i] != b[i] && a[i] >= 0 && b[i] >= 0) return false;
  return true;
}

// logits[..., C] with sparse labels; returns the per-example shape.
Shape check_sparse(const TensorType& logits, const TensorType& labels) {
  expect_f32(logits, "predictions");
  LS_CHECK(logits.shape.rank() >= 1, "predictions need a class axis, got ", logits.shape.str());
  LS_CHECK(labels.dtype == DType::i32 || labels.dtype == DType::f32,
           "labels must be int32 (or float32), got ", dtype_name(labels.dtype));
  Shape lead = leading(logits.shape);
  Shape with1 = lead;
  with1.push_back(1);
  LS_CHECK(dims_match(labels.shape, lead) || dims_match(labels.shape, with1), "labels ",
           labels.shape.str(), " do not match predictions ", logits.shape.str(),
           " (expected labels of shape ", lead.str(), ")");
  return lead;
}

Shape check_dense(const TensorType& a, const TensorType& b) {
  expect_f32(a, "predictions");
  expect_f32(b, "targets");
  LS_CHECK(dims_match(a.shape, b.shape), "targets ", b.shape.str(),
           " do not match predictions ", a.shape.str());
  return a.shape;
}

}  // namespace

LOCKSTEP_REGISTER(loss_ops) {
  add_op({.name = "sparse_softmax_cross_entropy",
          .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            return Types{f32(check_sparse(in[0], in[1]))};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return Values{b.add("sparse_softmax_cross_entropy_grad",
                                {dy[0], n.inputs[0], n.inputs[1]}, n.attrs),
                          Value{}};
          }});
  // (dy[...], logits, labels) -> dlogits = dy * (softmax(logits) - smoothed onehot)
  add_op({.name = "sparse_softmax_cross_entropy_grad", .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 3);
            Shape lead = check_sparse(in[1], in[2]);
            LS_CHECK(dims_match(in[0].shape, lead), "dy ", in[0].shape.str(), " does not match ",
                     lead.str());
            return Types{f32(in[1].shape)};
          }});

  add_op({.name = "softmax_cross_entropy",
          .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            return Types{f32(leading(check_dense(in[0], in[1])))};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return b.add_multi("softmax_cross_entropy_grad", {dy[0], n.inputs[0], n.inputs[1]},
                               n.attrs);
          }});
  // (dy, logits, targets) -> (dlogits, dtargets)
  add_op({.name = "softmax_cross_entropy_grad", .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 3);
            check_dense(in[1], in[2]);
            return Types{f32(in[1].shape), f32(in[2].shape)};
          }});

  add_op({.name = "sigmoid_cross_entropy",
          .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            return Types{f32(check_dense(in[0], in[1]))};
          },
          .grad = [](GradBuilder& b, const Node& n, const Values& dy) {
            return b.add_multi("sigmoid_cross_entropy_grad", {dy[0], n.inputs[0], n.inputs[1]});
          }});
  // (dy, logits, targets) -> (dlogits = dy * (sigmoid(z) - t), dtargets = -dy * z)
  add_op({.name = "sigmoid_cross_entropy_grad", .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 3);
            check_dense(in[1], in[2]);
            return Types{f32(in[1].shape), f32(in[2].shape)};
          }});

  // Metrics (no gradient).
  add_op({.name = "sparse_categorical_accuracy", .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            return Types{f32(check_sparse(in[0], in[1]))};
          }});
  add_op({.name = "in_top_k", .infer = [](const Node& n, const Types& in) {
            expect_inputs(in, 2);
            LS_CHECK(n.attrs.i("k", 1) >= 1, "k must be >= 1, got ", n.attrs.i("k", 1));
            return Types{f32(check_sparse(in[0], in[1]))};
          }});
  add_op({.name = "categorical_accuracy", .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            LS_CHECK(in[0].shape.rank() >= 1, "predictions need a class axis");
            return Types{f32(leading(check_dense(in[0], in[1])))};
          }});
  add_op({.name = "binary_accuracy", .infer = [](const Node&, const Types& in) {
            expect_inputs(in, 2);
            return Types{f32(check_dense(in[0], in[1]))};
          }});
}

}  // namespace lockstep::ops
