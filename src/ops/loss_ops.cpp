// Loss and metric op declarations (per-example outputs; train/ composes the reductions).
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
  LS_CHECK(dims_match(a.shape, b.shape), "targets ", b.shape.str(), " do not match predictions ",
           a.shape.str());
  return a.shape;
}

// (dy, logits, targets) -> (dlogits, dtargets).
Types dense_grad_infer(const Node&, const Types& in) {
  expect_inputs(in, 3);
  check_dense(in[1], in[2]);
  return {f32(in[1].shape), f32(in[2].shape)};
}

constexpr const char* kGroup = "loss";
const std::vector<AttrDecl> kSmoothing = {
    {"label_smoothing", f64, 0.0, "targets become onehot * (1 - ls) + ls / C (Keras)"}};
const char* kRowReason =
    "one row per example, cheap next to the model; the cpu backend "
    "parallelises the sparse variant, which the usual classifiers use";

void register_softmax_losses() {
  add_op(kGroup, {.name = op::sparse_softmax_cross_entropy,
                  .signature = "(logits[..., C], labels[...]) -> loss[...]",
                  .doc = "Cross-entropy of softmax(logits) against integer labels; a label "
                         "outside [0, C) is an error naming its row.",
                  .attrs = kSmoothing,
                  .infer =
                      [](const Node&, const Types& in) {
                        expect_inputs(in, 2);
                        return Types{f32(check_sparse(in[0], in[1]))};
                      },
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return Values{b.add(op::sparse_softmax_cross_entropy_grad,
                                            {dy[0], n.inputs[0], n.inputs[1]}, n.attrs),
                                      Value{}};
                      },
                  .onnx = {.none = kOnnxLossMetric}});
  add_op(kGroup, {.name = op::sparse_softmax_cross_entropy_grad,
                  .signature = "(dy[...], logits, labels) -> dlogits",
                  .doc = "dy * (softmax(logits) - smoothed onehot(labels)).",
                  .attrs = kSmoothing,
                  .infer =
                      [](const Node&, const Types& in) {
                        expect_inputs(in, 3);
                        Shape lead = check_sparse(in[1], in[2]);
                        LS_CHECK(dims_match(in[0].shape, lead), "dy ", in[0].shape.str(),
                                 " does not match ", lead.str());
                        return Types{f32(in[1].shape)};
                      },
                  .onnx = {.none = kOnnxGradient}});
  add_op(kGroup, {.name = op::softmax_cross_entropy,
                  .signature = "(logits[..., C], targets[..., C]) -> loss[...]",
                  .doc = "Cross-entropy of softmax(logits) against target distributions.",
                  .attrs = kSmoothing,
                  .infer =
                      [](const Node&, const Types& in) {
                        expect_inputs(in, 2);
                        return Types{f32(leading(check_dense(in[0], in[1])))};
                      },
                  .grad =
                      [](GradBuilder& b, const Node& n, const Values& dy) {
                        return b.add_multi(op::softmax_cross_entropy_grad,
                                           {dy[0], n.inputs[0], n.inputs[1]}, n.attrs);
                      },
                  .reference_only = kRowReason,
                  .onnx = {.none = kOnnxLossMetric}});
  add_op(kGroup, {.name = op::softmax_cross_entropy_grad,
                  .signature = "(dy, logits, targets) -> (dlogits, dtargets)",
                  .doc = "Gradient of softmax_cross_entropy with respect to both inputs.",
                  .attrs = kSmoothing,
                  .infer = dense_grad_infer,
                  .reference_only = kRowReason,
                  .onnx = {.none = kOnnxGradient}});
}

void register_sigmoid_loss() {
  add_op(
      kGroup,
      {.name = op::sigmoid_cross_entropy,
       .signature = "(logits, targets) -> loss",
       .doc = "Binary cross-entropy from logits, elementwise: max(z, 0) - z * t + "
              "log(1 + e^-|z|).",
       .infer =
           [](const Node&, const Types& in) {
             expect_inputs(in, 2);
             return Types{f32(check_dense(in[0], in[1]))};
           },
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             return b.add_multi(op::sigmoid_cross_entropy_grad, {dy[0], n.inputs[0], n.inputs[1]});
           },
       .reference_only = kRowReason,
       .onnx = {.none = kOnnxLossMetric}});
  add_op(kGroup, {.name = op::sigmoid_cross_entropy_grad,
                  .signature = "(dy, logits, targets) -> (dlogits, dtargets)",
                  .doc = "dlogits = dy * (sigmoid(z) - t), dtargets = -dy * z.",
                  .infer = dense_grad_infer,
                  .reference_only = kRowReason,
                  .onnx = {.none = kOnnxGradient}});
}

void register_metrics() {
  const char* why = "a metric per example, cheap next to the model";
  add_op(kGroup, {.name = op::sparse_categorical_accuracy,
                  .signature = "(pred[..., C], labels[...]) -> hit[...]",
                  .doc = "1 where argmax(pred) equals the label, else 0 (no gradient).",
                  .infer =
                      [](const Node&, const Types& in) {
                        expect_inputs(in, 2);
                        return Types{f32(check_sparse(in[0], in[1]))};
                      },
                  .onnx = {.none = kOnnxLossMetric}});
  add_op(kGroup, {.name = op::in_top_k,
                  .signature = "(pred[..., C], labels[...]) -> hit[...]",
                  .doc = "1 where fewer than k classes score strictly higher than the label "
                         "(ties count as hits).",
                  .attrs = {{"k", i64, 1, "how many top classes count"}},
                  .infer =
                      [](const Node& n, const Types& in) {
                        expect_inputs(in, 2);
                        LS_CHECK(attr_i(n, "k") >= 1, "k must be >= 1, got ", attr_i(n, "k"));
                        return Types{f32(check_sparse(in[0], in[1]))};
                      },
                  .reference_only = why,
                  .onnx = {.none = kOnnxLossMetric}});
  add_op(kGroup, {.name = op::categorical_accuracy,
                  .signature = "(pred[..., C], onehot[..., C]) -> hit[...]",
                  .doc = "1 where argmax(pred) equals argmax(onehot), else 0.",
                  .infer =
                      [](const Node&, const Types& in) {
                        expect_inputs(in, 2);
                        LS_CHECK(in[0].shape.rank() >= 1, "predictions need a class axis");
                        return Types{f32(leading(check_dense(in[0], in[1])))};
                      },
                  .reference_only = why,
                  .onnx = {.none = kOnnxLossMetric}});
  add_op(kGroup, {.name = op::binary_accuracy,
                  .signature = "(pred, targets) -> hit",
                  .doc = "1 where targets == (pred > threshold), elementwise (Keras).",
                  .attrs = {{"threshold", f64, 0.5, "the decision threshold"}},
                  .infer =
                      [](const Node&, const Types& in) {
                        expect_inputs(in, 2);
                        return Types{f32(check_dense(in[0], in[1]))};
                      },
                  .reference_only = why,
                  .onnx = {.none = kOnnxLossMetric}});
}

}  // namespace

LOCKSTEP_REGISTER(loss_ops) {
  register_softmax_losses();
  register_sigmoid_loss();
  register_metrics();
}

}  // namespace lockstep::ops
