// Pooling (MaxPool, AveragePool, GlobalAverage/MaxPool), reshaping (Flatten, Reshape,
// ZeroPadding2D as Pad) and
// merging (Add, Multiply, Concatenate) layers.
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

std::vector<OnnxValue> pool2d(ConvertCall& c) {
  const json& cfg = c.config;
  const auto kernel = cfg.at("pool_size").get<std::vector<int64_t>>();
  const auto strides = cfg.at("strides").get<std::vector<int64_t>>();
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsFirst);
  const bool max = c.layer().class_name() == "MaxPooling2D";
  pb::NodeProto& n =
      c.b.node(declared_onnx_op(max ? op::max_pool2d : op::avg_pool2d), {x.name}, c.name());
  set_attr(n, "kernel_shape", kernel);
  set_attr(n, "strides", strides);
  set_attr(n, "pads", spatial_pads(x.shape, kernel, strides, {1, 1}, cfg.at("padding")));
  // AveragePool's count_include_pad stays 0: Keras averages over the cells inside the image.
  return {c.output(n.output(0), Layout::kChannelsFirst)};
}

std::vector<OnnxValue> global_pool2d(ConvertCall& c) {
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsFirst);
  const bool max = c.layer().class_name() == "GlobalMaxPooling2D";
  std::string y = c.b.add(max ? "GlobalMaxPool" : "GlobalAveragePool", {x.name}, c.name());
  if (c.config.value("keepdims", false)) return {c.output(y, Layout::kChannelsFirst)};
  pb::NodeProto& flat = c.b.node("Flatten", {y}, c.name());  // [N, C, 1, 1] -> [N, C]
  set_attr(flat, "axis", int64_t(1));
  return {c.output(flat.output(0), Layout::kChannelsLast)};
}

std::vector<OnnxValue> flatten(ConvertCall& c) {
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  pb::NodeProto& n = c.b.node("Flatten", {x.name}, c.name());
  set_attr(n, "axis", int64_t(1));
  return {c.output(n.output(0), Layout::kChannelsLast)};
}

std::vector<OnnxValue> reshape(ConvertCall& c) {
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  std::vector<int64_t> shape = c.output_shape().vec();
  shape[0] = 0;  // ONNX Reshape: 0 copies the batch dimension
  std::string y = c.b.add(declared_onnx_op(op::reshape),
                          {x.name, c.b.constant_i64(c.name() + "/shape", shape)}, c.name());
  return {c.output(y, Layout::kChannelsLast)};
}

// The layout every input of a merge is brought to: channels-first when any rank-4 input
// already is (so a residual block stays NCHW), else channels-last.
Layout merge_layout(const std::vector<OnnxValue>& inputs) {
  for (const auto& v : inputs)
    if (v.channels_first()) return Layout::kChannelsFirst;
  return Layout::kChannelsLast;
}

std::vector<OnnxValue> elementwise_merge(ConvertCall& c) {
  const Layout layout = merge_layout(c.inputs);
  for (const auto& v : c.inputs)
    if (v.shape.rank() != c.inputs[0].shape.rank())
      unsupported(c, "inputs of different ranks (" + v.shape.str() + " and " +
                         c.inputs[0].shape.str() + ")");
  const std::string op = c.layer().class_name() == "Multiply" ? "Mul" : "Add";
  std::string y = c.b.to_layout(c.inputs.at(0), layout).name;
  for (size_t i = 1; i < c.inputs.size(); ++i)
    y = c.b.add(op, {y, c.b.to_layout(c.inputs[i], layout).name}, c.name());
  if (c.inputs.size() == 1) y = c.b.add("Identity", {y}, c.name());
  return {c.output(y, layout)};
}

std::vector<OnnxValue> concatenate(ConvertCall& c) {
  const Layout layout = merge_layout(c.inputs);
  std::vector<std::string> names;
  OnnxValue first = c.b.to_layout(c.inputs.at(0), layout);
  for (const auto& v : c.inputs) names.push_back(c.b.to_layout(v, layout).name);
  pb::NodeProto& n = c.b.node(declared_onnx_op(op::concat), names, c.name());
  set_attr(n, "axis", layout_axis(first, c.config.at("axis").get<int64_t>()));
  return {c.output(n.output(0), layout)};
}

// ZeroPadding2D: Pad with constant zeros on H and W (in whichever layout x is).
std::vector<OnnxValue> zero_padding2d(ConvertCall& c) {
  OnnxValue x = c.inputs.at(0);
  const json& p = c.config.at("padding");
  const int64_t t = p[0][0], b = p[0][1], l = p[1][0], r = p[1][1];
  std::vector<int64_t> pads = x.channels_first() ? std::vector<int64_t>{0, 0, t, l, 0, 0, b, r}
                                                 : std::vector<int64_t>{0, t, l, 0, 0, b, r, 0};
  std::string y = c.b.add("Pad", {x.name, c.b.constant_i64(c.name() + "/pads", pads)}, c.name());
  return {c.output(y, x.layout)};
}

}  // namespace

void add_structure_converters(ConverterTable& t) {
  t["ZeroPadding2D"] = zero_padding2d;
  t["MaxPooling2D"] = pool2d;
  t["AveragePooling2D"] = pool2d;
  t["GlobalAveragePooling2D"] = global_pool2d;
  t["GlobalMaxPooling2D"] = global_pool2d;
  t["Flatten"] = flatten;
  t["Reshape"] = reshape;
  t["Add"] = elementwise_merge;
  t["Multiply"] = elementwise_merge;
  t["Concatenate"] = concatenate;
}

}  // namespace lockstep::onnx
