// Activation, ReLU, LeakyReLU, ELU, PReLU, Rescaling, Normalization, BatchNormalization (when not
// folded), LayerNormalization and GroupNormalization.
#include <cmath>

#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

std::vector<OnnxValue> activation(ConvertCall& c) {
  std::string act = c.config.value("activation", "linear");
  OnnxValue y = apply_activation(c.b, c.inputs.at(0), act, c.name());
  if (y.name == c.inputs[0].name) y.name = c.b.add("Identity", {y.name}, c.name());  // linear
  return {y};
}

// ReLU: Relu, Clip(0, max_value), LeakyRelu, or Clip(x, 0, max) - slope * Relu(-x).
std::vector<OnnxValue> relu(ConvertCall& c) {
  const json& cfg = c.config;
  const json max_value = cfg.value("max_value", json(nullptr));
  const float slope = float(cfg.value("negative_slope", 0.0));
  if (cfg.value("threshold", 0.0) != 0.0) unsupported(c, "only threshold=0 is exported");
  OnnxValue x = c.inputs.at(0);
  if (max_value.is_null() && slope == 0.f) return {apply_activation(c.b, x, "relu", c.name())};
  if (max_value.is_null()) {
    pb::NodeProto& n = c.b.node("LeakyRelu", {x.name}, c.name());
    set_attr(n, "alpha", slope);
    return {c.output(n.output(0), x.layout)};
  }
  std::string y =
      c.b.add("Clip",
              {x.name, c.b.constant(c.name() + "/zero", {0.f}, {}),
               c.b.constant(c.name() + "/max_value", {float(max_value.get<double>())}, {})},
              c.name());
  if (slope != 0.f) {
    std::string neg = c.b.add("Relu", {c.b.add("Neg", {x.name}, c.name())}, c.name());
    neg = c.b.add("Mul", {neg, c.b.constant(c.name() + "/slope", {slope}, {})}, c.name());
    y = c.b.add("Sub", {y, neg}, c.name());
  }
  return {c.output(y, x.layout)};
}

// LeakyReLU -> LeakyRelu(alpha = negative_slope); ELU -> Elu(alpha). Either layout.
std::vector<OnnxValue> leaky_relu(ConvertCall& c) {
  OnnxValue x = c.inputs.at(0);
  pb::NodeProto& n = c.b.node("LeakyRelu", {x.name}, c.name());
  set_attr(n, "alpha", float(c.config.at("negative_slope").get<double>()));
  return {c.output(n.output(0), x.layout)};
}

std::vector<OnnxValue> elu(ConvertCall& c) {
  OnnxValue x = c.inputs.at(0);
  pb::NodeProto& n = c.b.node("Elu", {x.name}, c.name());
  set_attr(n, "alpha", float(c.config.at("alpha").get<double>()));
  return {c.output(n.output(0), x.layout)};
}

// PReLU -> PRelu(x, alpha): alpha's Keras shape (the input's without the batch) broadcasts
// against the channels-last input.
std::vector<OnnxValue> prelu(ConvertCall& c) {
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  const Tensor& alpha = weight(c.layer(), "alpha");
  std::string y = c.b.add(
      "PRelu", {x.name, c.b.constant(c.name() + "/alpha", alpha.to_vector(), alpha.shape().vec())},
      c.name());
  return {c.output(y, Layout::kChannelsLast)};
}

std::vector<OnnxValue> rescaling(ConvertCall& c) {
  OnnxValue y = c.inputs.at(0);
  const float scale = float(c.config.at("scale").get<double>());
  const float offset = float(c.config.at("offset").get<double>());
  y.name = c.b.add("Mul", {y.name, c.b.constant(c.name() + "/scale", {scale}, {})}, c.name());
  y.name = c.b.add("Add", {y.name, c.b.constant(c.name() + "/offset", {offset}, {})}, c.name());
  return {y};
}

// Normalization's kept axes (Keras: an int, a list, or None = one statistic).
std::vector<int64_t> kept_axes(const json& axis, int64_t rank) {
  std::vector<int64_t> axes;
  if (axis.is_number_integer())
    axes.push_back(axis.get<int64_t>());
  else if (axis.is_array())
    axes = axis.get<std::vector<int64_t>>();
  for (auto& a : axes) a = a < 0 ? a + rank : a;
  std::sort(axes.begin(), axes.end());
  return axes;
}

std::vector<OnnxValue> normalization(ConvertCall& c) {
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  const int64_t rank = x.shape.rank();
  std::vector<int64_t> bcast(size_t(rank), 1);
  for (int64_t a : kept_axes(c.config.value("axis", json(nullptr)), rank))
    bcast[size_t(a)] = x.shape[int(a)];
  std::vector<float> mean, var;
  if (c.config.value("mean", json(nullptr)).is_null()) {  // adapted: the layer's weights
    mean = weight(c.layer(), "mean").to_vector();
    var = weight(c.layer(), "variance").to_vector();
  } else {
    for (double v : c.config.at("mean").get<std::vector<double>>()) mean.push_back(float(v));
    for (double v : c.config.at("variance").get<std::vector<double>>()) var.push_back(float(v));
  }
  int64_t n = 1;
  for (int64_t d : bcast) n *= d;
  if (int64_t(mean.size()) != n || int64_t(var.size()) != n)
    unsupported(c, "statistics of " + std::to_string(mean.size()) + " values for " +
                       std::to_string(n) + " kept positions");
  std::vector<float> sd(var.size());
  for (size_t i = 0; i < var.size(); ++i) sd[i] = std::max(std::sqrt(var[i]), 1e-7f);
  std::string m = c.b.constant(c.name() + "/mean", mean, bcast);
  std::string s = c.b.constant(c.name() + "/stddev", sd, bcast);
  std::string y = c.config.value("invert", false)
                      ? c.b.add("Add", {c.b.add("Mul", {x.name, s}, c.name()), m}, c.name())
                      : c.b.add("Div", {c.b.add("Sub", {x.name, m}, c.name()), s}, c.name());
  return {c.output(y, Layout::kChannelsLast)};
}

std::vector<float> or_fill(const Tensor* t, size_t n, float v) {
  return t ? t->to_vector() : std::vector<float>(n, v);
}

std::vector<OnnxValue> batch_normalization(ConvertCall& c) {
  const Layer& bn = c.layer();
  const int64_t rank = c.inputs.at(0).shape.rank();
  if (rank == 2 || rank == 4) {  // ONNX BatchNormalization, channels at axis 1, inference mode
    OnnxValue x = c.b.to_layout(c.inputs[0], Layout::kChannelsFirst);
    std::vector<float> mean = weight(bn, "moving_mean").to_vector();
    const int64_t C = int64_t(mean.size());
    std::vector<std::string> ins{
        x.name,
        c.b.constant(c.name() + "/gamma", or_fill(find_weight(bn, "gamma"), mean.size(), 1.f), {C}),
        c.b.constant(c.name() + "/beta", or_fill(find_weight(bn, "beta"), mean.size(), 0.f), {C}),
        c.b.constant(c.name() + "/moving_mean", mean, {C}),
        c.b.constant(c.name() + "/moving_variance", weight(bn, "moving_variance").to_vector(),
                     {C})};
    pb::NodeProto& n = c.b.node(declared_onnx_op(op::batch_norm_infer), ins, c.name());
    set_attr(n, "epsilon", float(c.config.at("epsilon").get<double>()));
    return {c.output(n.output(0), x.layout)};
  }
  // Other ranks: the same inference formula as a per-channel Mul and Add on the last axis.
  OnnxValue x = c.b.to_layout(c.inputs[0], Layout::kChannelsLast);
  ChannelAffine a = batch_norm_affine(bn);
  const int64_t C = int64_t(a.scale.size());
  std::string y =
      c.b.add("Mul", {x.name, c.b.constant(c.name() + "/scale", a.scale, {C})}, c.name());
  y = c.b.add("Add", {y, c.b.constant(c.name() + "/shift", a.shift, {C})}, c.name());
  return {c.output(y, Layout::kChannelsLast)};
}

std::vector<OnnxValue> layer_normalization(ConvertCall& c) {
  if (c.config.value("rms_scaling", false)) unsupported(c, "rms_scaling=True");
  OnnxValue x = c.b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  const int64_t C = x.shape[-1];
  const Layer& l = c.layer();
  std::vector<std::string> ins{
      x.name,
      c.b.constant(c.name() + "/gamma", or_fill(find_weight(l, "gamma"), size_t(C), 1.f), {C}),
      c.b.constant(c.name() + "/beta", or_fill(find_weight(l, "beta"), size_t(C), 0.f), {C})};
  pb::NodeProto& n = c.b.node("LayerNormalization", ins, c.name());
  set_attr(n, "axis", int64_t(-1));
  set_attr(n, "epsilon", float(c.config.at("epsilon").get<double>()));
  return {c.output(n.output(0), Layout::kChannelsLast)};
}

// GroupNormalization: on NCHW (rank 4) or [N, C] (rank 2), Reshape to [N, G, rest] and
// InstanceNormalization (one mean and variance per sample and group; unit scale, zero bias),
// Reshape back, then gamma and beta per channel. (ONNX's GroupNormalization needs opset 18,
// and its scale and bias were per group until opset 21; this works at every opset.)
std::vector<OnnxValue> group_normalization(ConvertCall& c) {
  const int64_t rank = c.inputs.at(0).shape.rank();
  if (rank != 2 && rank != 4) unsupported(c, "only inputs of rank 2 or 4 are exported");
  OnnxValue x = rank == 4 ? c.b.to_layout(c.inputs[0], Layout::kChannelsFirst) : c.inputs[0];
  const int64_t G = c.config.at("groups").get<int64_t>();
  const int64_t C = c.inputs[0].shape[-1];
  const Layer& l = c.layer();
  std::string grouped = c.b.add(
      "Reshape", {x.name, c.b.constant_i64(c.name() + "/groups_shape", {0, G, -1})}, c.name());
  pb::NodeProto& n = c.b.node(
      "InstanceNormalization",
      {grouped, c.b.constant(c.name() + "/unit_scale", std::vector<float>(size_t(G), 1.f), {G}),
       c.b.constant(c.name() + "/zero_bias", std::vector<float>(size_t(G), 0.f), {G})},
      c.name());
  set_attr(n, "epsilon", float(c.config.at("epsilon").get<double>()));
  std::string y = c.b.add("Reshape", {n.output(0), c.b.add("Shape", {x.name}, c.name())}, c.name());
  std::vector<int64_t> dims = rank == 4 ? std::vector<int64_t>{C, 1, 1} : std::vector<int64_t>{C};
  if (const Tensor* gamma = find_weight(l, "gamma"))
    y = c.b.add("Mul", {y, c.b.constant(c.name() + "/gamma", gamma->to_vector(), dims)}, c.name());
  if (const Tensor* beta = find_weight(l, "beta"))
    y = c.b.add("Add", {y, c.b.constant(c.name() + "/beta", beta->to_vector(), dims)}, c.name());
  return {c.output(y, x.layout)};
}

}  // namespace

void add_elementwise_converters(ConverterTable& t) {
  t["Activation"] = activation;
  t["ReLU"] = relu;
  t["Rescaling"] = rescaling;
  t["Normalization"] = normalization;
  t["BatchNormalization"] = batch_normalization;
  t["LayerNormalization"] = layer_normalization;
  t["GroupNormalization"] = group_normalization;
  t["LeakyReLU"] = leaky_relu;
  t["ELU"] = elu;
  t["PReLU"] = prelu;
}

}  // namespace lockstep::onnx
