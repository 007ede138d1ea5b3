// The attention layers as MatMul + Softmax: MultiHeadAttention and GroupQueryAttention project
// query, key and value (MatMul with the kernel read as (d, heads * dim), Add the bias), split the
// heads (Reshape, Transpose to (B, heads, T, dim); grouped-query key/value heads repeated by
// Expand), take scale * q k^T, mask it (Where: the attention_mask input and the causal rule,
// -1e9 where masked, as Keras's softmax), Softmax over the keys, multiply by v and project the
// merged heads. Attention (dot) is the same with one head, no projections and its scale weight.
// A Keras mask on an input (Embedding(mask_zero)) and return_attention_scores are refused.
#include <cmath>

#include "lockstep/nn/attention.h"
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

std::string reshape(GraphBuilder& b, const std::string& x, const std::vector<int64_t>& shape,
                    const std::string& base) {
  return b.add("Reshape", {x, b.constant_i64(base + "/shape", shape)}, base);
}

std::string transpose(GraphBuilder& b, const std::string& x, const std::vector<int64_t>& perm,
                      const std::string& base) {
  pb::NodeProto& t = b.node("Transpose", {x}, base);
  set_attr(t, "perm", perm);
  return t.output(0);
}

// x (B, T, d) @ kernel (d, heads * dim) + bias -> (B, heads, T, dim).
std::string project(ConvertCall& c, const std::string& x, int64_t T, const char* w, int64_t heads,
                    int64_t dim) {
  GraphBuilder& b = c.b;
  const std::string base = c.name() + "/" + w;
  const Tensor& k = weight(c.layer(), std::string(w) + "/kernel");
  std::string y = b.add(
      "MatMul", {x, b.constant(base + "/kernel", k.to_vector(), {k.dim(0), heads * dim})}, base);
  if (const Tensor* bias = find_weight(c.layer(), std::string(w) + "/bias"))
    y = b.add("Add", {y, b.constant(base + "/bias", bias->to_vector(), {heads * dim})}, base);
  return transpose(b, reshape(b, y, {0, T, heads, dim}, base), {0, 2, 1, 3}, base);
}

// (B, Hkv, S, dim) -> (B, Hkv * G, S, dim), kv head h / G for query head h.
std::string repeat_heads(GraphBuilder& b, const std::string& x, int64_t Hkv, int64_t G, int64_t S,
                         int64_t dim, const std::string& base) {
  if (G == 1) return x;
  std::string r = reshape(b, x, {0, Hkv, 1, S, dim}, base);
  r = b.add("Expand", {r, b.constant_i64(base + "/expand", {1, 1, G, 1, 1})}, base);
  return reshape(b, r, {0, Hkv * G, S, dim}, base);
}

// softmax(scale * q k^T masked) v for q (B, H, T, dk), k (B, H, S, dk), v (B, H, S, dv).
std::string attend(ConvertCall& c, const std::string& q, const std::string& k, const std::string& v,
                   const layers::AttentionCallInfo& info, int64_t T, int64_t S,
                   const std::string& mask) {
  GraphBuilder& b = c.b;
  const std::string base = c.name() + "/attention";
  std::string s = b.add("MatMul", {q, transpose(b, k, {0, 1, 3, 2}, base)}, base);
  s = b.add("Mul", {s, b.constant(base + "/scale", {float(info.scale)}, {})}, base);
  std::string cond;
  if (!mask.empty()) {
    pb::NodeProto& cast = b.node("Cast", {mask}, base + "/mask");
    set_attr(cast, "to", int64_t(pb::TensorProto::BOOL));
    cond = reshape(b, cast.output(0), {0, 1, T, S}, base + "/mask");
  }
  if (info.causal) {
    std::vector<float> tril(size_t(T * S));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j) tril[size_t(i * S + j)] = j <= i ? 1.f : 0.f;
    pb::NodeProto& cast =
        b.node("Cast", {b.constant(base + "/causal", tril, {1, 1, T, S})}, base + "/causal");
    set_attr(cast, "to", int64_t(pb::TensorProto::BOOL));
    cond = cond.empty() ? cast.output(0) : b.add("And", {cond, cast.output(0)}, base);
  }
  if (!cond.empty()) s = b.add("Where", {cond, s, b.constant(base + "/masked", {-1e9f}, {})}, base);
  pb::NodeProto& sm = b.node("Softmax", {s}, base);
  set_attr(sm, "axis", int64_t(-1));
  return b.add("MatMul", {sm.output(0), v}, base);
}

layers::AttentionCallInfo checked_info(const ConvertCall& c) {
  auto info = layers::attention_call_info(c.layer());
  if (!info) unsupported(c, "not an attention layer Lockstep built");
  if (info->scores) unsupported(c, "return_attention_scores has no ONNX export yet");
  for (const KTensor& in : c.call.inputs)
    if (in.masked())
      unsupported(c,
                  "an input carries a Keras mask, which the exported attention does not "
                  "apply; export a model without the mask (or pass an attention_mask)");
  return *info;
}

std::vector<OnnxValue> multi_head(ConvertCall& c) {
  const layers::AttentionCallInfo info = checked_info(c);
  GraphBuilder& b = c.b;
  std::vector<std::string> in;
  for (const OnnxValue& v : c.inputs) in.push_back(b.to_layout(v, Layout::kChannelsLast).name);
  const int64_t T = c.inputs[0].shape[1], S = c.inputs[1].shape[1];
  const int64_t H = info.num_heads, Hkv = info.num_kv_heads, G = H / Hkv;
  const std::string& key = info.has_key ? in[2] : in[1];
  std::string q = project(c, in[0], T, "query", H, info.key_dim);
  std::string k = project(c, key, S, "key", Hkv, info.key_dim);
  std::string v = project(c, in[1], S, "value", Hkv, info.value_dim);
  k = repeat_heads(b, k, Hkv, G, S, info.key_dim, c.name() + "/key");
  v = repeat_heads(b, v, Hkv, G, S, info.value_dim, c.name() + "/value");
  std::string y = attend(c, q, k, v, info, T, S, info.has_mask ? in.back() : "");
  y = reshape(b, transpose(b, y, {0, 2, 1, 3}, c.name()), {0, T, H * info.value_dim}, c.name());
  const Tensor& ok = weight(c.layer(), "attention_output/kernel");
  const int64_t dout = ok.numel() / (H * info.value_dim);
  const std::string base = c.name() + "/attention_output";
  y = b.add("MatMul", {y, b.constant(base + "/kernel", ok.to_vector(), {H * info.value_dim, dout})},
            base);
  if (const Tensor* bias = find_weight(c.layer(), "attention_output/bias"))
    y = b.add("Add", {y, b.constant(base + "/bias", bias->to_vector(), {dout})}, base);
  std::vector<int64_t> out = c.output_shape().vec();
  out[0] = 0;
  if (out.size() != 3) y = reshape(b, y, out, base);
  return {c.output(y, Layout::kChannelsLast)};
}

std::vector<OnnxValue> dot_attention(ConvertCall& c) {
  const layers::AttentionCallInfo info = checked_info(c);
  GraphBuilder& b = c.b;
  std::vector<std::string> in;
  for (const OnnxValue& v : c.inputs) in.push_back(b.to_layout(v, Layout::kChannelsLast).name);
  const int64_t T = c.inputs[0].shape[1], S = c.inputs[1].shape[1], d = c.inputs[0].shape[2];
  auto heads = [&](const std::string& x, int64_t t) {
    return reshape(b, x, {0, 1, t, d}, c.name());
  };
  std::string y = attend(c, heads(in[0], T), heads(info.has_key ? in[2] : in[1], S),
                         heads(in[1], S), info, T, S, "");
  return {c.output(reshape(b, y, {0, T, d}, c.name()), Layout::kChannelsLast)};
}

}  // namespace

void add_attention_converters(ConverterTable& t) {
  t["MultiHeadAttention"] = multi_head;
  t["GroupQueryAttention"] = multi_head;
  t["Attention"] = dot_attention;
}

}  // namespace lockstep::onnx
