// Declarations of the transformer building blocks (issue 36) besides fused attention:
// batch_matmul (matmul over broadcast batch dims), rms_norm (+ grad), rotary_embedding (KerasHub's
// RotaryEmbedding, rotate-half) and random_categorical (sampling for generation).
#include <algorithm>

#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;

bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16; }

// ---- batch_matmul ----

// [..., M, K] x [..., K, N] -> broadcast(...) + [M, N] (transposes swap the last two dims).
Types batch_matmul_infer(const Node& n, const Types& in) {
  expect_inputs(in, 2);
  LS_CHECK(is_float_type(in[0].dtype) && is_float_type(in[1].dtype),
           "a and b must be float32 or bfloat16, got ", dtype_name(in[0].dtype), " and ",
           dtype_name(in[1].dtype));
  const Shape &a = in[0].shape, &b = in[1].shape;
  LS_CHECK(a.rank() >= 2 && b.rank() >= 2, "a and b need at least 2 dims, got ", a.str(), " and ",
           b.str());
  const bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  const int64_t M = a[ta ? -1 : -2], Ka = a[ta ? -2 : -1];
  const int64_t Kb = b[tb ? -1 : -2], N = b[tb ? -2 : -1];
  LS_CHECK(Ka < 0 || Kb < 0 || Ka == Kb, "inner dimensions differ: a ", a.str(), " has K=", Ka,
           ", b ", b.str(), " has K=", Kb);
  Shape ba, bb;
  for (int i = 0; i + 2 < a.rank(); ++i) ba.push_back(a[i]);
  for (int i = 0; i + 2 < b.rank(); ++i) bb.push_back(b[i]);
  Shape out = broadcast_shapes(ba, bb);
  out.push_back(M);
  out.push_back(N);
  return {f32(out)};
}

Values batch_matmul_grad(GradBuilder& b, const Node& n, const Values& dy) {
  const bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
  const Value A = n.inputs[0], B = n.inputs[1], G = dy[0];
  auto mm = [&](Value x, Value y, bool t1, bool t2) {
    return b.add(op::batch_matmul, {x, y}, Attrs{{"transpose_a", t1}, {"transpose_b", t2}});
  };
  Value dA = ta ? mm(B, G, tb, true) : mm(G, B, false, !tb);
  Value dB = tb ? mm(G, A, true, ta) : mm(A, G, !ta, false);
  return {b.sum_to(dA, b.type(A).shape), b.sum_to(dB, b.type(B).shape)};
}

// Row r of y comes from row r of a (and of b when b carries rows): a's dim 0 is a batch dim.
bool batch_matmul_keeps_rows(const Node&, const Types& in, const std::vector<bool>& rows) {
  const int ra = in[0].shape.rank(), rb = in[1].shape.rank();
  if (!rows[0] || ra < 3) return false;
  return rows[1] ? rb == ra : rb < ra || in[1].shape[0] == 1;
}

void register_batch_matmul() {
  add_op("nn",
         {.name = op::batch_matmul,
          .signature = "(a[..., M, K], b[..., K, N]) -> y[..., M, N]",
          .doc = "The matrix product of the last two dims, numpy-broadcast over any number of "
                 "leading batch dims (as np.matmul); either operand optionally transposed "
                 "(its last two dims swapped). bfloat16 operands accumulate in float32.",
          .attrs = {{"transpose_a", boolean, false, "use a's last two dims swapped"},
                    {"transpose_b", boolean, false, "use b's last two dims swapped"}},
          .infer = batch_matmul_infer,
          .grad = batch_matmul_grad,
          .bf16 = true,
          .rows = RowRule::by_attrs,
          .keeps_rows = batch_matmul_keeps_rows,
          .onnx = {.op = "MatMul"}});
}

// ---- rms_norm ----

Types rms_norm_infer(const Node&, const Types& in) {
  expect_inputs(in, 2);
  expect_f32(in[0], "x");
  expect_f32(in[1], "scale");
  LS_CHECK(in[0].shape.rank() >= 1, "x must have at least one axis");
  const int64_t C = in[0].shape[-1];
  LS_CHECK(in[1].shape == Shape{C}, "scale has shape ", in[1].shape.str(), ", expected (", C,
           ") to match the last axis of x ", in[0].shape.str());
  return {in[0]};
}

Types rms_norm_grad_infer(const Node& n, const Types& in) {
  expect_inputs(in, 3);
  LS_CHECK(in[0].shape == in[1].shape, "dy ", in[0].shape.str(), " and x ", in[1].shape.str(),
           " differ");
  rms_norm_infer(n, {in[1], in[2]});
  return {in[1], in[2]};
}

const std::vector<AttrDecl> kRmsAttrs = {
    {"epsilon", f64, 1e-6, "added to the mean square (keras.layers.RMSNormalization's default)"}};

void register_rms_norm() {
  add_op("norm",
         {.name = op::rms_norm,
          .signature = "(x[..., C], scale[C]) -> y",
          .doc = "RMS normalisation over the last axis: x * rsqrt(mean(x^2) + epsilon) * "
                 "scale (keras.ops.rms_normalization); computes in float32.",
          .attrs = kRmsAttrs,
          .infer = rms_norm_infer,
          .grad =
              [](GradBuilder& b, const Node& n, const Values& dy) {
                return b.add_multi(op::rms_norm_grad, {dy[0], n.inputs[0], n.inputs[1]},
                                   attrs_for(op::rms_norm_grad, n.attrs));
              },
          .bf16 = true,
          .rows = RowRule::per_row,
          .onnx = {.none = "ONNX's RMSNormalization is opset 23, beyond the exporter's; the "
                           "exporter has no converter for the RMSNormalization layer yet"}});
  add_op("norm", {.name = op::rms_norm_grad,
                  .signature = "(dy, x, scale) -> (dx, dscale)",
                  .doc = "Gradient of rms_norm (recomputes the row's rsqrt from x).",
                  .attrs = kRmsAttrs,
                  .infer = rms_norm_grad_infer,
                  .bf16 = true,
                  .bf16_outputs = {0},
                  .onnx = {.none = kOnnxGradient}});
}

// ---- rotary_embedding ----

Types rotary_infer(const Node& n, const Types& in) {
  LS_CHECK(in.size() == 1 || in.size() == 2, "expects (x[, start_index]), got ", in.size(),
           " inputs");
  expect_f32(in[0], "x");
  const Shape& x = in[0].shape;
  LS_CHECK(x.rank() >= 2, "x needs at least 2 dims (sequence and feature), got ", x.str());
  const int r = x.rank();
  const int64_t s = attr_i(n, "sequence_axis"), f = attr_i(n, "feature_axis");
  const int64_t sa = s < 0 ? s + r : s, fa = f < 0 ? f + r : f;
  LS_CHECK(sa >= 0 && sa < r && fa >= 0 && fa < r && sa != fa, "sequence_axis ", s,
           " and feature_axis ", f, " must be two different axes of x ", x.str());
  LS_CHECK(x[int(fa)] > 0 && x[int(fa)] % 2 == 0, "the feature axis of x ", x.str(),
           " must have an even size (pairs of features rotate together)");
  LS_CHECK(attr_f(n, "scaling_factor") > 0, "scaling_factor must be positive");
  LS_CHECK(attr_f(n, "max_wavelength") > 0, "max_wavelength must be positive");
  if (in.size() == 2)
    LS_CHECK((in[1].dtype == DType::i32 || in[1].dtype == DType::f32) && in[1].shape.numel() == 1,
             "start_index must be one int32 or float32 value, got ", dtype_name(in[1].dtype), " ",
             in[1].shape.str());
  return {in[0]};
}

void register_rotary() {
  add_op(
      "sequence",
      {.name = op::rotary_embedding,
       .signature = "(x[, start_index]) -> y",
       .doc = "KerasHub's RotaryEmbedding (rotate-half): with D features, d < D/2, theta_d = "
              "position / scaling_factor * max_wavelength^(-2d/D) where position = start_index + "
              "the index along sequence_axis, y[d] = x[d] cos - x[d + D/2] sin and y[d + D/2] = "
              "x[d + D/2] cos + x[d] sin. The optional input start_index (one value) is added to "
              "the attribute (a key/value cache's offset). inverse rotates by -theta (the "
              "gradient).",
       .attrs = {{"max_wavelength", f64, 10000.0, "the longest wavelength"},
                 {"scaling_factor", f64, 1.0, "positions are divided by it"},
                 {"sequence_axis", i64, 1, "the positions' axis"},
                 {"feature_axis", i64, -1, "the rotated features' axis (even size)"},
                 {"start_index", i64, 0, "the first position"},
                 {"inverse", boolean, false, "rotate by -theta (the gradient's transpose)"}},
       .infer = rotary_infer,
       .grad =
           [](GradBuilder& b, const Node& n, const Values& dy) {
             Attrs a = n.attrs;
             a.set("inverse", !attr_b(n, "inverse"));
             Values in{dy[0]};
             if (n.inputs.size() == 2) in.push_back(n.inputs[1]);
             Values g{b.add(op::rotary_embedding, in, a)};
             if (n.inputs.size() == 2) g.push_back(Value{});
             return g;
           },
       .reference_only = "elementwise with a cos/sin per (position, feature): memory-bound",
       .bf16 = true,
       .rows = RowRule::by_attrs,
       .keeps_rows =
           [](const Node& n, const Types& in, const std::vector<bool>& rows) {
             const int r = in[0].shape.rank();
             const int64_t s = attr_i(n, "sequence_axis"), f = attr_i(n, "feature_axis");
             return rows[0] && (s < 0 ? s + r : s) != 0 && (f < 0 ? f + r : f) != 0;
           },
       .onnx = {.none = "no layer that exports to ONNX uses it yet (ONNX's RotaryEmbedding is "
                        "opset 23, beyond the exporter's)"}});
}

// ---- random_categorical ----

Types categorical_infer(const Node& n, const Types& in) {
  expect_inputs(in, 1);
  expect_f32(in[0], "logits");
  LS_CHECK(in[0].shape.rank() == 2, "logits must be 2-D (batch, classes), got ", in[0].shape.str());
  LS_CHECK(attr_f(n, "temperature") > 0, "temperature must be positive, got ",
           attr_f(n, "temperature"), " (for greedy decoding take the argmax instead)");
  LS_CHECK(attr_i(n, "top_k") >= 0, "top_k must be >= 0 (0: every class), got ",
           attr_i(n, "top_k"));
  return {{DType::i32, Shape{in[0].shape[0]}}};
}

void register_categorical() {
  add_op("sequence",
         {.name = op::random_categorical,
          .signature = "(logits[B, V]) -> ids[B] (int32)",
          .doc = "One class per row drawn from softmax(logits / temperature), restricted to the "
                 "top_k largest logits when top_k > 0 (ties: the lower index first). The draw is "
                 "Philox4x32-10 keyed as dropout's (attr seed, node, replica, model seed) with "
                 "counter (step, row): deterministic for a fixed seed and step.",
          .attrs = {{"seed", i64, 0, "part of the random key"},
                    {"temperature", f64, 1.0, "logits are divided by it (> 0)"},
                    {"top_k", i64, 0, "sample among the k most likely classes (0: all)"}},
          .infer = categorical_infer,
          .rows = RowRule::per_row,
          .onnx = {.none = "sampling for text generation: not part of an exported model"},
          .xla = {.none = "sampling for text generation runs on the host backends (reference, "
                          "cpu), between the compiled model's steps"}});
}

}  // namespace

LOCKSTEP_REGISTER(transformer_ops) {
  register_batch_matmul();
  register_rms_norm();
  register_rotary();
  register_categorical();
}

}  // namespace lockstep::ops
