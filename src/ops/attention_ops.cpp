// Declaration of the fused attention op scaled_dot_product_attention (+ its gradient), in the
// layout of keras.ops.dot_product_attention: q (B, Tq, H, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv,
// Dv), Hkv dividing H (grouped-query attention), an optional keep-mask broadcastable to
// (B, H, Tq, Tk), a causal rule, a scale and dropout on the weights (drawn in-kernel from
// Philox, so the gradient redraws them instead of keeping them).
#include "ops/internal/attention.h"
#include "ops/internal/op_util.h"

namespace lockstep::ops {

namespace {

using Types = std::vector<TensorType>;
using Values = std::vector<Value>;
constexpr const char* kGroup = "nn";

void check_float(const TensorType& t, const char* what) {
  LS_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16, what,
           " must be float32 or bfloat16, got ", dtype_name(t.dtype));
}

// The mask's strides along (B, H, Tq, Tk), numpy broadcasting from the right.
void mask_strides(const Shape& m, AttentionGeom& g) {
  LS_CHECK(m.rank() <= 4, "mask has shape ", m.str(),
           ", expected at most 4 axes broadcastable to (batch, heads, Tq, Tk) = (", g.B, ", ", g.H,
           ", ", g.Tq, ", ", g.Tk, ")");
  const int64_t full[4] = {g.B, g.H, g.Tq, g.Tk};
  int64_t stride = 1;
  for (int a = 3, d = m.rank() - 1; a >= 0; --a, --d) {
    if (d < 0) continue;
    LS_CHECK(m[d] == 1 || m[d] == full[a] || m[d] < 0 || full[a] < 0, "mask has shape ", m.str(),
             ", not broadcastable to (batch, heads, Tq, Tk) = (", g.B, ", ", g.H, ", ", g.Tq, ", ",
             g.Tk, ")");
    g.ms[a] = m[d] == 1 ? 0 : stride;
    stride *= m[d] < 0 ? full[a] : m[d];
  }
}

}  // namespace

AttentionGeom attention_geom(const Node& n, const std::vector<TensorType>& in, size_t first) {
  LS_CHECK(in.size() == first + 3 || in.size() == first + 4,
           "expects inputs (q, k, v[, mask]) after ", first, " others, got ", in.size());
  const Shape &q = in[first].shape, &k = in[first + 1].shape, &v = in[first + 2].shape;
  check_float(in[first], "q");
  check_float(in[first + 1], "k");
  check_float(in[first + 2], "v");
  LS_CHECK(q.rank() == 4 && k.rank() == 4 && v.rank() == 4,
           "q, k and v must be (batch, time, heads, head_dim), got q ", q.str(), ", k ", k.str(),
           ", v ", v.str());
  AttentionGeom g;
  g.B = q[0], g.Tq = q[1], g.H = q[2], g.D = q[3];
  g.Tk = k[1], g.Hkv = k[2], g.Dv = v[3];
  LS_CHECK(k[0] == g.B && v[0] == g.B, "q, k and v must have one batch size, got q ", q.str(),
           ", k ", k.str(), ", v ", v.str());
  LS_CHECK(k[3] == g.D, "q's head size ", g.D, " differs from k's ", k[3], " (q ", q.str(), ", k ",
           k.str(), ")");
  LS_CHECK(v[1] == g.Tk && v[2] == g.Hkv, "k ", k.str(), " and v ", v.str(),
           " must have the same time and head axes");
  LS_CHECK(g.Hkv > 0 && g.H > 0 && g.H % g.Hkv == 0, "k/v's heads (", g.Hkv,
           ") must divide q's heads (", g.H, ")");
  g.causal = attr_b(n, "causal");
  const double scale = attr_f(n, "scale");
  g.scale = float(scale != 0 ? scale : 1.0 / std::sqrt(double(g.D)));
  g.dropout = attr_f(n, "dropout");
  LS_CHECK(g.dropout >= 0 && g.dropout < 1, "dropout must be in [0, 1), got ", g.dropout);
  g.masked = in.size() == first + 4;
  if (g.masked) {
    const TensorType& m = in[first + 3];
    LS_CHECK(m.dtype == DType::f32 || m.dtype == DType::u8 || m.dtype == DType::bf16,
             "mask must be float32 or uint8 (1 = attend), got ", dtype_name(m.dtype));
    mask_strides(m.shape, g);
  }
  return g;
}

namespace {

Types sdpa_infer(const Node& n, const Types& in) {
  const AttentionGeom g = attention_geom(n, in, 0);
  Types out{{in[0].dtype, Shape{g.B, g.Tq, g.H, g.Dv}}, f32(Shape{g.B, g.H, g.Tq})};
  if (attr_b(n, "return_weights")) out.push_back(f32(Shape{g.B, g.H, g.Tq, g.Tk}));
  return out;
}

// (dy, q, k, v[, mask], y, lse) -> (dq, dk, dv).
Types sdpa_grad_infer(const Node& n, const Types& in) {
  LS_CHECK(in.size() == 6 || in.size() == 7, "expects (dy, q, k, v[, mask], y, lse), got ",
           in.size(), " inputs");
  std::vector<TensorType> fwd(in.begin() + 1, in.end() - 2);
  const AttentionGeom g = attention_geom(n, fwd, 0);
  const Shape ys{g.B, g.Tq, g.H, g.Dv};
  LS_CHECK(in[0].shape == ys, "dy has shape ", in[0].shape.str(), ", expected ", ys.str());
  LS_CHECK(in[in.size() - 2].shape == ys, "y has shape ", in[in.size() - 2].shape.str(),
           ", expected ", ys.str());
  LS_CHECK(in.back().shape == (Shape{g.B, g.H, g.Tq}) && in.back().dtype == DType::f32,
           "lse must be float32 (batch, heads, Tq), got ", in.back().shape.str());
  return {{in[1].dtype, in[1].shape}, {in[2].dtype, in[2].shape}, {in[3].dtype, in[3].shape}};
}

Values sdpa_grad(GradBuilder& b, const Node& n, const Values& dy) {
  Values in{dy[0]};
  for (Value v : n.inputs) in.push_back(v);
  in.push_back(Value{n.id, 0});
  in.push_back(Value{n.id, 1});
  Values g = b.add_multi(op::scaled_dot_product_attention_grad, in,
                         attrs_for(op::scaled_dot_product_attention_grad, n.attrs));
  if (n.inputs.size() == 4) g.push_back(Value{});  // the mask gets none
  return g;
}

std::vector<AttrDecl> sdpa_attrs() {
  return {{"causal", boolean, false,
           "query i sees keys j <= i only (top-left aligned when Tq != Tk, as Keras)"},
          {"scale", f64, 0.0, "the logits' factor; 0: 1 / sqrt(head_dim)"},
          {"dropout", f64, 0.0,
           "the fraction of attention weights dropped (training), in [0, 1); drawn from Philox "
           "keyed by seed, replica and model seed, counter = (step, element / 4) over (B, H, "
           "Tq, Tk), so the gradient redraws the same"},
          {"seed", i64, 0, "the dropout's key (give each attention node its own)"}};
}

}  // namespace

LOCKSTEP_REGISTER(attention_ops) {
  std::vector<AttrDecl> fwd = sdpa_attrs();
  fwd.push_back({"return_weights", boolean, false,
                 "a third output: the softmax weights (B, H, Tq, Tk), before dropout, as "
                 "Keras's return_attention_scores (it carries no gradient)"});
  add_op(kGroup,
         {.name = op::scaled_dot_product_attention,
          .signature = "(q[B, Tq, H, D], k[B, Tk, Hkv, D], v[B, Tk, Hkv, Dv][, mask]) -> "
                       "(y[B, Tq, H, Dv], lse[B, H, Tq][, weights[B, H, Tq, Tk]])",
          .doc = "Fused attention, keras.ops.dot_product_attention's layout: y = softmax(scale "
                 "* q k^T, masked) v per head, head h of q reading k/v head h / (H / Hkv) "
                 "(grouped-query); mask (float or uint8, 1 = attend) broadcasts to (B, H, Tq, "
                 "Tk) and a masked logit is -1e9 (Keras's); lse = the rows' log-sum-exp, which "
                 "the gradient reads instead of the weights.",
          .attrs = fwd,
          .infer = sdpa_infer,
          .grad = sdpa_grad,
          .bf16 = true,
          .bf16_outputs = {0},
          .onnx = {.none = "not exported yet (MatMul + Softmax could express it)"}});
  add_op(kGroup, {.name = op::scaled_dot_product_attention_grad,
                  .signature = "(dy, q, k, v[, mask], y, lse) -> (dq, dk, dv)",
                  .doc = "Gradient of scaled_dot_product_attention: recomputes the weights from "
                         "q, k and lse (and redraws the dropout) instead of reading them.",
                  .attrs = sdpa_attrs(),
                  .infer = sdpa_grad_infer,
                  .bf16 = true,
                  .onnx = {.none = kOnnxGradient}});
}

}  // namespace lockstep::ops
