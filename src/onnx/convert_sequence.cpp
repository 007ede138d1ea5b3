// The sequence-input layers: Embedding as Gather (its ids, which the graph input's Cast made
// float32, cast to int64 first: Keras truncates float ids the same way) and Masking as
// Mul(x, Sign(MatMul(Cast(Not(Equal(x, mask_value))), ones))). An id outside [0, input_dim)
// is onnxruntime's error (Gather checks its indices).
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

std::vector<OnnxValue> embedding(ConvertCall& c) {
  const Tensor& table = weight(c.layer(), "embeddings");
  GraphBuilder& b = c.b;
  OnnxValue ids = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  pb::NodeProto& cast = b.node("Cast", {ids.name}, c.name() + "/ids");
  set_attr(cast, "to", int64_t(pb::TensorProto::INT64));
  const std::string t =
      b.constant(c.name() + "/embeddings", table.to_vector(), {table.dim(0), table.dim(1)});
  pb::NodeProto& g = b.node(declared_onnx_op(op::gather), {t, cast.output(0)}, c.name());
  set_attr(g, "axis", int64_t(0));
  return {c.output(g.output(0), Layout::kChannelsLast)};
}

std::vector<OnnxValue> masking(ConvertCall& c) {
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  const float v = c.config.value("mask_value", 0.0f);
  const std::string ref = b.constant(c.name() + "/mask_value", {v}, {});
  const std::string ne =
      b.add("Not", {b.add(declared_onnx_op(op::equal), {x.name, ref}, c.name())}, c.name());
  pb::NodeProto& f = b.node("Cast", {ne}, c.name());
  set_attr(f, "to", int64_t(pb::TensorProto::FLOAT));
  // "any feature differs" as Sign(count of differing features), the count a MatMul with ones:
  // the same at every opset (ReduceMax moved its axes from an attribute to an input at 18).
  const int64_t features = x.shape[-1];
  const std::string ones =
      b.constant(c.name() + "/ones", std::vector<float>(size_t(features), 1.f), {features, 1});
  const std::string count = b.add("MatMul", {f.output(0), ones}, c.name());
  const std::string any = b.add("Sign", {count}, c.name());
  const std::string y = b.add("Mul", {x.name, any}, c.name());
  return {c.output(y, Layout::kChannelsLast)};
}

}  // namespace

void add_sequence_converters(ConverterTable& t) {
  t["Embedding"] = embedding;
  t["Masking"] = masking;
}

}  // namespace lockstep::onnx
