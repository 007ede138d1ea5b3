// The 1D layers: Conv1D (Conv over a unit height axis, "causal" as a Pad ahead of it), the 1D
// pools (MaxPool / AveragePool / GlobalAverage- / GlobalMaxPool likewise), ZeroPadding1D (Pad),
// Permute (Transpose) and SpatialDropout1D (the identity at inference). A [N, W, C] value is
// reshaped to [N, 1, W, C] for the 2D operators and back after them.
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

using I = std::vector<int64_t>;

// [N, W, C] -> [N, 1, W, C] (channels-last), for the 2D operators.
OnnxValue to_4d(ConvertCall& c, const OnnxValue& x) {
  const Shape& s = x.shape;
  if (s.rank() != 3) unsupported(c, "expects an input of rank 3, got " + s.str());
  const std::string y =
      c.b.add(declared_onnx_op(op::reshape),
              {x.name, c.b.constant_i64(c.name() + "/to_4d", I{0, 1, s[1], s[2]})}, c.name());
  return OnnxValue{y, Shape{s[0], 1, s[1], s[2]}, Layout::kChannelsLast};
}

// A rank-4 result [N, 1, W', C'] (either layout) -> the layer's output [N, W', C'].
OnnxValue to_3d(ConvertCall& c, const OnnxValue& y4) {
  const OnnxValue y = c.b.to_layout(y4, Layout::kChannelsLast);
  const Shape& out = c.output_shape();
  const std::string r =
      c.b.add(declared_onnx_op(op::reshape),
              {y.name, c.b.constant_i64(c.name() + "/to_3d", I{0, out[1], out[2]})}, c.name());
  return c.output(r, Layout::kChannelsLast);
}

// Zeros ahead of (before) and behind (after) the steps of a [N, W, C] value.
OnnxValue pad_steps(ConvertCall& c, const OnnxValue& x, int64_t before, int64_t after) {
  const std::string y = c.b.add(
      declared_onnx_op(op::pad),
      {x.name, c.b.constant_i64(c.name() + "/pads", I{0, before, 0, 0, after, 0})}, c.name());
  Shape s = x.shape;
  s[1] += before + after;
  return OnnxValue{y, s, Layout::kChannelsLast};
}

std::vector<OnnxValue> conv1d(ConvertCall& c) {
  const json& cfg = c.config;
  const Tensor& k = weight(c.layer(), "kernel");  // Keras's [K, C / G, F]
  const int64_t K = k.dim(0), cg = k.dim(1), F = k.dim(2);
  const int64_t stride = cfg.at("strides")[0], dil = cfg.at("dilation_rate")[0];
  std::string padding = cfg.at("padding");
  OnnxValue x = c.inputs.at(0);
  if (padding == "causal") x = pad_steps(c, x, dil * (K - 1), 0), padding = "valid";
  const OnnxValue x4 = c.b.to_layout(to_4d(c, x), Layout::kChannelsFirst);
  std::vector<float> src = k.to_vector(), oihw(src.size());  // -> [F, C / G, 1, K]
  for (int64_t j = 0; j < K; ++j)
    for (int64_t i = 0; i < cg; ++i)
      for (int64_t o = 0; o < F; ++o)
        oihw[size_t((o * cg + i) * K + j)] = src[size_t((j * cg + i) * F + o)];
  std::vector<std::string> ins{x4.name, c.b.constant(c.name() + "/kernel", oihw, {F, cg, 1, K})};
  if (const Tensor* b = find_weight(c.layer(), "bias"))
    ins.push_back(c.b.constant(c.name() + "/bias", b->to_vector(), {F}));
  pb::NodeProto& n = c.b.node(declared_onnx_op(op::conv2d), ins, c.name());
  set_attr(n, "kernel_shape", I{1, K});
  set_attr(n, "strides", I{1, stride});
  set_attr(n, "dilations", I{1, dil});
  set_attr(n, "pads", spatial_pads(x4.shape, {1, K}, {1, stride}, {1, dil}, padding));
  set_attr(n, "group", cfg.value("groups", int64_t(1)));
  const OnnxValue y4{n.output(0), Shape{x.shape[0], 1, c.output_shape()[1], F},
                     Layout::kChannelsFirst};
  return {apply_activation(c.b, to_3d(c, y4), cfg.value("activation", "linear"), c.name())};
}

std::vector<OnnxValue> pool1d(ConvertCall& c) {
  const json& cfg = c.config;
  const I kernel{1, cfg.at("pool_size")[0].get<int64_t>()};
  const I strides{1, cfg.at("strides")[0].get<int64_t>()};
  const OnnxValue x4 = c.b.to_layout(to_4d(c, c.inputs.at(0)), Layout::kChannelsFirst);
  const bool max = c.layer().class_name() == "MaxPooling1D";
  pb::NodeProto& n =
      c.b.node(declared_onnx_op(max ? op::max_pool2d : op::avg_pool2d), {x4.name}, c.name());
  set_attr(n, "kernel_shape", kernel);
  set_attr(n, "strides", strides);
  set_attr(n, "pads", spatial_pads(x4.shape, kernel, strides, {1, 1}, cfg.at("padding")));
  // AveragePool's count_include_pad stays 0: Keras averages over the steps inside the sequence.
  const Shape& out = c.output_shape();
  return {
      to_3d(c, OnnxValue{n.output(0), Shape{out[0], 1, out[1], out[2]}, Layout::kChannelsFirst})};
}

// [N, W, C] -> [N, C] ([N, 1, C] with keepdims). A masked input (GlobalAveragePooling1D's mean
// over the unmasked steps) has no ONNX form here: the exported graph carries no masks.
std::vector<OnnxValue> global_pool1d(ConvertCall& c) {
  if (c.call.inputs.at(0).masked())
    unsupported(c,
                "its input carries a mask, which the exported ONNX graph does not; export a "
                "model without masking");
  const OnnxValue x4 = c.b.to_layout(to_4d(c, c.inputs.at(0)), Layout::kChannelsFirst);
  const bool max = c.layer().class_name() == "GlobalMaxPooling1D";
  const std::string y = c.b.add(max ? "GlobalMaxPool" : "GlobalAveragePool", {x4.name}, c.name());
  const int64_t C = c.inputs[0].shape[2];
  const I shape = c.config.value("keepdims", false) ? I{0, 1, C} : I{0, C};
  const std::string r = c.b.add(declared_onnx_op(op::reshape),
                                {y, c.b.constant_i64(c.name() + "/shape", shape)}, c.name());
  return {c.output(r, Layout::kChannelsLast)};
}

std::vector<OnnxValue> zero_padding1d(ConvertCall& c) {
  const json& p = c.config.at("padding");
  OnnxValue y = pad_steps(c, c.inputs.at(0), p[0].get<int64_t>(), p[1].get<int64_t>());
  return {c.output(y.name, Layout::kChannelsLast)};
}

std::vector<OnnxValue> permute(ConvertCall& c) {
  const OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  I perm{0};
  for (const json& d : c.config.at("dims")) perm.push_back(d.get<int64_t>());
  pb::NodeProto& n = c.b.node(declared_onnx_op(op::transpose), {x.name}, c.name());
  set_attr(n, "perm", perm);
  return {c.output(n.output(0), Layout::kChannelsLast)};
}

std::vector<OnnxValue> inference_identity(ConvertCall& c) {
  c.b.report().removed.push_back(c.name());
  OnnxValue v = c.inputs.at(0);
  v.shape = c.output_shape();
  return {v};
}

}  // namespace

void add_1d_converters(ConverterTable& t) {
  t["Conv1D"] = conv1d;
  t["MaxPooling1D"] = pool1d;
  t["AveragePooling1D"] = pool1d;
  t["GlobalAveragePooling1D"] = global_pool1d;
  t["GlobalMaxPooling1D"] = global_pool1d;
  t["ZeroPadding1D"] = zero_padding1d;
  t["Permute"] = permute;
  t["SpatialDropout1D"] = inference_identity;
}

}  // namespace lockstep::onnx
