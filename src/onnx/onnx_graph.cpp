// GraphBuilder and the helpers the layer converters share (weights, BatchNormalization's
// affine form, activations, padding, layout axes).
#include "onnx/onnx_graph.h"

#include <algorithm>
#include <cmath>
#include <string_view>

#include "lockstep/graph/op_registry.h"

namespace lockstep::onnx {

void set_attr(pb::NodeProto& node, const std::string& name, int64_t value) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INT);
  a->set_i(value);
}

void set_attr(pb::NodeProto& node, const std::string& name, float value) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::FLOAT);
  a->set_f(value);
}

void set_attr(pb::NodeProto& node, const std::string& name, const std::string& value) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::STRING);
  a->set_s(value);
}

void set_attr(pb::NodeProto& node, const std::string& name, const std::vector<int64_t>& value) {
  auto* a = node.add_attribute();
  a->set_name(name);
  a->set_type(pb::AttributeProto::INTS);
  for (int64_t v : value) a->add_ints(v);
}

std::string GraphBuilder::fresh(const std::string& base) {
  std::string name = base.empty() ? "t" : base;
  for (int i = 1; names_.count(name); ++i) name = base + "_" + std::to_string(i);
  names_.insert(name);
  return name;
}

pb::NodeProto& GraphBuilder::node(const std::string& op, const std::vector<std::string>& inputs,
                                  const std::string& base, int outputs) {
  pb::NodeProto& n = *graph_.add_node();
  n.set_op_type(op);
  n.set_name(fresh(base + "/" + op));
  for (const auto& i : inputs) n.add_input(i);
  for (int i = 0; i < outputs; ++i)
    n.add_output(fresh(base + (i ? "/out" + std::to_string(i) : "")));
  ++report_.nodes;
  return n;
}

std::string GraphBuilder::constant(const std::string& base, const std::vector<float>& values,
                                   const std::vector<int64_t>& dims) {
  const std::string_view bytes(reinterpret_cast<const char*>(values.data()),
                               values.size() * sizeof(float));
  size_t hash = std::hash<std::string_view>()(bytes);
  for (int64_t d : dims) hash = hash * 1000003u ^ std::hash<int64_t>()(d);
  if (share_constants_) {
    auto [lo, hi] = float_constants_.equal_range(hash);
    for (auto it = lo; it != hi; ++it) {
      const pb::TensorProto& old = graph_.initializer(it->second);
      if (old.raw_data() == bytes &&
          std::equal(old.dims().begin(), old.dims().end(), dims.begin(), dims.end()))
        return old.name();
    }
  }
  float_constants_.emplace(hash, graph_.initializer_size());
  pb::TensorProto& t = *graph_.add_initializer();
  t.set_name(fresh(base));
  t.set_data_type(pb::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    n *= d;
  }
  LS_CHECK(n == int64_t(values.size()), "ONNX export: initializer '", t.name(), "' has ",
           values.size(), " values for ", n, " elements");
  // raw_data: little-endian float32, as the ONNX spec stores it (x86-64 is little-endian).
  t.set_raw_data(values.data(), values.size() * sizeof(float));
  ++report_.initializers;
  report_.parameters += n;
  return t.name();
}

std::string GraphBuilder::constant_i64(const std::string& base,
                                       const std::vector<int64_t>& values) {
  pb::TensorProto& t = *graph_.add_initializer();
  t.set_name(fresh(base));
  t.set_data_type(pb::TensorProto::INT64);
  t.add_dims(int64_t(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  ++report_.initializers;
  return t.name();
}

OnnxValue GraphBuilder::to_layout(const OnnxValue& value, Layout want) {
  if (value.layout == want || value.shape.rank() != 4) return {value.name, value.shape, want};
  const auto key = std::make_pair(value.name, int(want));
  auto it = transposed_.find(key);
  if (it != transposed_.end()) return it->second;
  const bool to_first = want == Layout::kChannelsFirst;
  pb::NodeProto& t = node("Transpose", {value.name}, value.name + (to_first ? "_nchw" : "_nhwc"));
  set_attr(t, "perm",
           to_first ? std::vector<int64_t>{0, 3, 1, 2} : std::vector<int64_t>{0, 2, 3, 1});
  ++report_.transposes;
  OnnxValue r{t.output(0), value.shape, want};
  transposed_[key] = r;
  transposed_[std::make_pair(r.name, int(value.layout))] = value;  // and back again for free
  return r;
}

void GraphBuilder::declare(pb::ValueInfoProto& info, const std::string& name, const Shape& shape,
                           int32_t elem_type, int64_t batch_size) const {
  info.set_name(name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  auto* dims = tensor->mutable_shape();
  for (int i = 0; i < shape.rank(); ++i) {
    auto* d = dims->add_dim();
    if (i == 0 && batch_size <= 0)
      d->set_dim_param("batch");
    else
      d->set_dim_value(i == 0 ? batch_size : shape[i]);
  }
}

const Tensor* find_weight(const Layer& layer, const std::string& name) {
  const std::string suffix = "/" + name;
  for (const auto& v : layer.weights()) {
    const std::string& n = v->name;
    if (n == name || (n.size() > suffix.size() &&
                      n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0))
      return &v->value;
  }
  return nullptr;
}

const Tensor& weight(const Layer& layer, const std::string& name) {
  const Tensor* t = find_weight(layer, name);
  LS_CHECK(t, layer.class_name(), " '", layer.name(), "': has no weight '", name,
           "' (is the layer built?)");
  LS_CHECK(t->dtype() == DType::f32, layer.class_name(), " '", layer.name(), "': weight '", name,
           "' is ", dtype_name(t->dtype()), "; ONNX export writes float32 weights");
  return *t;
}

ChannelAffine batch_norm_affine(const Layer& bn) {
  const double eps = bn.config().at("epsilon").get<double>();
  std::vector<float> mean = weight(bn, "moving_mean").to_vector();
  std::vector<float> var = weight(bn, "moving_variance").to_vector();
  const Tensor* gamma = find_weight(bn, "gamma");
  const Tensor* beta = find_weight(bn, "beta");
  std::vector<float> g = gamma ? gamma->to_vector() : std::vector<float>(mean.size(), 1.f);
  std::vector<float> bt = beta ? beta->to_vector() : std::vector<float>(mean.size(), 0.f);
  ChannelAffine a;
  for (size_t c = 0; c < mean.size(); ++c) {
    const double scale = double(g[c]) / std::sqrt(double(var[c]) + eps);
    a.scale.push_back(float(scale));
    a.shift.push_back(float(double(bt[c]) - double(mean[c]) * scale));
  }
  return a;
}

namespace {

std::string scalar(GraphBuilder& b, const std::string& base, float v) {
  return b.constant(base, {v}, {});
}

}  // namespace

// An ONNX recipe of OpDef::onnx (a few nodes for one Lockstep op) on value x.
static std::string build_recipe(GraphBuilder& b, const std::string& recipe, const std::string& x,
                                const std::string& layer_name) {
  if (recipe == "clip:0:6")
    return b.add("Clip",
                 {x, scalar(b, layer_name + "/zero", 0.f), scalar(b, layer_name + "/six", 6.f)},
                 layer_name);
  if (recipe == "x*sigmoid(x)")
    return b.add("Mul", {x, b.add("Sigmoid", {x}, layer_name)}, layer_name);
  if (recipe == "x*x") return b.add("Mul", {x, x}, layer_name);
  if (recipe == "erf_gelu") {  // exact: x * 0.5 * (1 + erf(x / sqrt(2)))
    std::string e = b.add(
        "Erf",
        {b.add("Div", {x, scalar(b, layer_name + "/sqrt2", float(std::sqrt(2.0)))}, layer_name)},
        layer_name);
    std::string one_plus = b.add("Add", {e, scalar(b, layer_name + "/one", 1.f)}, layer_name);
    return b.add("Mul",
                 {b.add("Mul", {x, one_plus}, layer_name), scalar(b, layer_name + "/half", 0.5f)},
                 layer_name);
  }
  LS_FAIL("layer '", layer_name, "': the ONNX recipe '", recipe, "' is not known to the exporter");
}

OnnxValue apply_activation(GraphBuilder& b, const OnnxValue& value, const std::string& act,
                           const std::string& layer_name) {
  if (act.empty() || act == "linear") return value;
  const OpDef* def = OpRegistry::get().activation_op(act);
  LS_CHECK(def, "layer '", layer_name, "': unknown activation '", act, "'");
  const OnnxLowering& onnx = def->onnx;
  LS_CHECK(!onnx.op.empty() || !onnx.recipe.empty(), "layer '", layer_name, "': activation '", act,
           "' cannot be exported to ONNX (", onnx.none, ")");
  OnnxValue v = value;
  if (!onnx.recipe.empty()) {
    v.name = build_recipe(b, onnx.recipe, v.name, layer_name);
    return v;
  }
  // An op over an axis (softmax, log_softmax) needs its axis where Keras has it: channels last.
  const bool axis_op = def->attr("axis") != nullptr;
  if (axis_op) v = b.to_layout(value, Layout::kChannelsLast);
  pb::NodeProto& n = b.node(onnx.op, {v.name}, layer_name);
  for (const auto& [key, val] : onnx.attrs) set_attr(n, key, float(val));
  if (axis_op) set_attr(n, "axis", int64_t(-1));
  v.name = n.output(0);
  return v;
}

std::vector<int64_t> spatial_pads(const Shape& in, const std::vector<int64_t>& kernel,
                                  const std::vector<int64_t>& strides,
                                  const std::vector<int64_t>& dilations,
                                  const std::string& padding) {
  std::vector<int64_t> pads(4, 0);
  if (padding != "same") return pads;
  for (int i = 0; i < 2; ++i) {
    const int64_t size = in[1 + i], s = strides[size_t(i)];
    const int64_t effective = (kernel[size_t(i)] - 1) * dilations[size_t(i)] + 1;
    const int64_t out = (size + s - 1) / s;
    const int64_t total = std::max<int64_t>((out - 1) * s + effective - size, 0);
    pads[size_t(i)] = total / 2;
    pads[size_t(i) + 2] = total - total / 2;
  }
  return pads;
}

int64_t layout_axis(const OnnxValue& v, int64_t axis) {
  const int64_t rank = v.shape.rank();
  if (axis < 0) axis += rank;
  if (!v.channels_first()) return axis;
  static const int64_t nchw_of_nhwc[4] = {0, 2, 3, 1};
  return nchw_of_nhwc[axis];
}

void unsupported(const ConvertCall& c, const std::string& message) {
  LS_FAIL(c.layer().class_name(), " '", c.name(), "': cannot be exported to ONNX: ", message);
}

const std::string& declared_onnx_op(OpId id) {
  const OpDef& d = OpRegistry::get().op(id);
  LS_CHECK(!d.onnx.op.empty(), "ONNX export: op ", id, " declares no ONNX operator (",
           d.onnx.none.empty() ? d.onnx.recipe : d.onnx.none, ")");
  return d.onnx.op;
}

}  // namespace lockstep::onnx
