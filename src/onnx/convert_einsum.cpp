// EinsumDense as ONNX Einsum (+ Add of the bias, then its activation), RMSNormalization and
// UnitNormalization over the last axis with opset-independent nodes (the sum over the last axis
// a MatMul with a column of ones: ReduceMean/ReduceSumSquare moved their axes to an input at
// opset 18), and Softmax over one axis.
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

std::vector<OnnxValue> einsum_dense(ConvertCall& c) {
  GraphBuilder& b = c.b;
  const Tensor& k = weight(c.layer(), "kernel");
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  const std::string w = b.constant(c.name() + "/kernel", k.to_vector(), k.shape().vec());
  pb::NodeProto& e = b.node("Einsum", {x.name, w}, c.name());
  std::string eq;
  for (char ch : c.config.at("equation").get<std::string>())
    if (ch != ' ') eq += ch;
  set_attr(e, "equation", eq);
  std::string y = e.output(0);
  if (const Tensor* bias = find_weight(c.layer(), "bias"))
    y = b.add("Add", {y, b.constant(c.name() + "/bias", bias->to_vector(), bias->shape().vec())},
              c.name());
  OnnxValue out = c.output(y, Layout::kChannelsLast);
  return {apply_activation(b, out, c.config.value("activation", "linear"), c.name())};
}

// The last axis of the layer's input; an error for any other axis.
void last_axis_only(const ConvertCall& c, const json& axis, int rank) {
  std::vector<int64_t> axes;
  if (axis.is_array())
    for (const json& a : axis) axes.push_back(a.get<int64_t>());
  else
    axes.push_back(axis.get<int64_t>());
  LS_CHECK(axes.size() == 1 && (axes[0] == -1 || axes[0] == rank - 1), c.layer().class_name(), " '",
           c.name(), "': cannot be exported to ONNX: axis ", axis.dump(),
           "; the exporter takes the last axis only");
}

// sum(v, last axis, keepdims) * factor, as a MatMul with a column of `factor`.
std::string row_sum(GraphBuilder& b, const std::string& v, int64_t C, float factor,
                    const std::string& name) {
  const std::string ones =
      b.constant(name + "/ones", std::vector<float>(size_t(C), factor), {C, 1});
  return b.add("MatMul", {v, ones}, name);
}

std::vector<OnnxValue> rms_normalization(ConvertCall& c) {
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  last_axis_only(c, c.config.at("axis"), x.shape.rank());
  const int64_t C = x.shape[-1];
  const float eps = c.config.value("epsilon", 1e-6f);
  const std::string ms =
      row_sum(b, b.add("Mul", {x.name, x.name}, c.name()), C, 1.f / float(C), c.name());
  const std::string r =
      b.add("Reciprocal",
            {b.add("Sqrt", {b.add("Add", {ms, b.constant(c.name() + "/eps", {eps}, {})}, c.name())},
                   c.name())},
            c.name());
  const Tensor& s = weight(c.layer(), "scale");
  const std::string y = b.add(
      "Mul",
      {b.add("Mul", {x.name, r}, c.name()), b.constant(c.name() + "/scale", s.to_vector(), {C})},
      c.name());
  return {c.output(y, Layout::kChannelsLast)};
}

std::vector<OnnxValue> unit_normalization(ConvertCall& c) {
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  last_axis_only(c, c.config.at("axis"), x.shape.rank());
  const std::string ss =
      row_sum(b, b.add("Mul", {x.name, x.name}, c.name()), x.shape[-1], 1.f, c.name());
  std::string inv = b.add("Reciprocal", {b.add("Sqrt", {ss}, c.name())}, c.name());
  inv = b.add("Min", {inv, b.constant(c.name() + "/max", {1e12f}, {})}, c.name());
  return {c.output(b.add("Mul", {x.name, inv}, c.name()), Layout::kChannelsLast)};
}

std::vector<OnnxValue> softmax(ConvertCall& c) {
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  const json& axis = c.config.at("axis");
  LS_CHECK(!c.call.inputs.at(0).masked(), "Softmax '", c.name(),
           "': cannot be exported to ONNX with a mask (the exported graph carries none)");
  LS_CHECK(axis.is_number_integer() || axis.size() == 1, "Softmax '", c.name(),
           "': cannot be exported to ONNX: axis ", axis.dump(),
           " spans several axes; the exporter takes one");
  pb::NodeProto& n = b.node("Softmax", {x.name}, c.name());
  set_attr(n, "axis", axis.is_array() ? axis[0].get<int64_t>() : axis.get<int64_t>());
  return {c.output(n.output(0), Layout::kChannelsLast)};
}

}  // namespace

void add_einsum_converters(ConverterTable& t) {
  t["EinsumDense"] = einsum_dense;
  t["RMSNormalization"] = rms_normalization;
  t["UnitNormalization"] = unit_normalization;
  t["Softmax"] = softmax;
}

}  // namespace lockstep::onnx
