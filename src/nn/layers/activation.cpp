// Activations: apply_activation (shared by Dense/Conv), Activation, ReLU (with max_value and
// negative_slope), LeakyReLU, ELU, PReLU (a learned slope per position or channel) and Rescaling
// layers.
#include "lockstep/graph/op_registry.h"
#include "nn/layers/layer_util.h"

namespace lockstep {

Value apply_activation(Graph& g, Value x, const std::string& activation, const std::string& name) {
  const std::string& a = activation;
  if (a.empty() || a == "linear") return x;
  const OpDef* def = OpRegistry::get().activation_op(a);
  LS_CHECK(def, (name.empty() ? "" : "'" + name + "': "), "unknown activation '", a,
           "'; valid names: ", layer_util::activation_names());
  // An op without bfloat16 support runs in f32 under mixed precision (softmax: its sum of
  // exponentials needs the mantissa).
  if (!def->bf16 && g.type(x).dtype != DType::f32)
    x = g.add(op::cast, {x}, Attrs{{"dtype", std::string("float32")}});
  // Keras's activation strings use the ops' declared defaults (softmax over the last axis, exact
  // gelu, leaky_relu with slope 0.2).
  return g.add(def->name, {x}, {}, name);
}

namespace {

class ActivationLayer : public Layer {
 public:
  ActivationLayer(std::string act, std::string name)
      : Layer(std::move(name)), act_(std::move(act)) {
    try {
      layer_util::check_activation(act_);
    } catch (const Error& e) {
      LS_FAIL("Activation '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "Activation"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override { return {{"activation", act_.empty() ? "linear" : act_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {apply_activation(ctx.graph, in.at(0), act_, name())};
  }

 private:
  std::string act_;
};

// keras.layers.ReLU(max_value, negative_slope, threshold=0): relu6 for max_value 6, leaky_relu
// for a slope alone, else min(relu(x), max_value) - slope * relu(-x) (Keras's formula).
class ReLULayer : public Layer {
 public:
  ReLULayer(layers::ReLUOptions o, std::string name) : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(!o_.max_value || *o_.max_value >= 0, "ReLU '", this->name(),
             "': max_value must be >= 0, got ", *o_.max_value);
    LS_CHECK(o_.negative_slope >= 0, "ReLU '", this->name(), "': negative_slope must be >= 0, got ",
             o_.negative_slope);
    LS_CHECK(o_.threshold == 0.0, "ReLU '", this->name(), "': threshold ", o_.threshold,
             " is not supported (only 0); use max_value and negative_slope");
  }
  std::string class_name() const override { return "ReLU"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    return {{"max_value", o_.max_value ? json(*o_.max_value) : json(nullptr)},
            {"negative_slope", o_.negative_slope},
            {"threshold", o_.threshold}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const double slope = o_.negative_slope;
    if (!o_.max_value && slope == 0.0) return {g.add(op::relu, {x}, {}, name())};
    if (!o_.max_value) return {g.add(op::leaky_relu, {x}, Attrs{{"alpha", slope}}, name())};
    const bool six = *o_.max_value == 6.0;
    Value y = g.add(six ? op::relu6 : op::relu, {x}, {}, slope == 0.0 && six ? name() : "");
    if (!six)
      y = g.add(op::minimum, {y, scalar_like(g, x, *o_.max_value)}, {}, slope == 0.0 ? name() : "");
    if (slope == 0.0) return {y};
    Value neg = g.add(op::relu, {g.add(op::neg, {x})});
    neg = g.add(op::scale_shift, {neg}, Attrs{{"scale", -slope}, {"shift", 0.0}});
    return {g.add(op::add, {y, neg}, {}, name())};
  }

 private:
  static Value scalar_like(Graph& g, Value x, double v) {
    Value s = g.scalar(float(v));
    if (g.type(x).dtype == DType::f32) return s;
    return g.add(op::cast, {s}, Attrs{{"dtype", std::string(dtype_name(g.type(x).dtype))}});
  }
  layers::ReLUOptions o_;
};

// keras.layers.LeakyReLU(negative_slope=0.3): the leaky_relu op with alpha = the slope.
class LeakyReLULayer : public Layer {
 public:
  LeakyReLULayer(double slope, std::string name) : Layer(std::move(name)), slope_(slope) {
    LS_CHECK(slope_ >= 0, "LeakyReLU '", this->name(), "': negative_slope must be >= 0, got ",
             slope_);
  }
  std::string class_name() const override { return "LeakyReLU"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override { return {{"negative_slope", slope_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::leaky_relu, {in.at(0)}, Attrs{{"alpha", slope_}}, name())};
  }

 private:
  double slope_;
};

// keras.layers.ELU(alpha=1.0): the elu op.
class ELULayer : public Layer {
 public:
  ELULayer(double alpha, std::string name) : Layer(std::move(name)), alpha_(alpha) {}
  std::string class_name() const override { return "ELU"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override { return {{"alpha", alpha_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::elu, {in.at(0)}, Attrs{{"alpha", alpha_}}, name())};
  }

 private:
  double alpha_;
};

// keras.layers.PReLU: relu(x) - alpha * relu(-x) (Keras's formula), alpha [input shape without
// the batch, 1 on the shared axes] broadcast over the batch.
class PReLULayer : public Layer {
 public:
  PReLULayer(layers::PReLUOptions o, std::string name) : Layer(std::move(name)), o_(std::move(o)) {
    try {
      check_initializer(o_.alpha_initializer);
    } catch (const Error& e) {
      LS_FAIL("PReLU '", this->name(), "': alpha_initializer: ", e.what());
    }
    for (int64_t a : o_.shared_axes)
      LS_CHECK(a >= 1, "PReLU '", this->name(),
               "': shared_axes are input axes counted from 1 (the first after the batch), got ", a);
  }
  std::string class_name() const override { return "PReLU"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    return {{"alpha_initializer", layer_util::initializer_json(o_.alpha_initializer)},
            {"alpha_regularizer", layer_util::regularizer_json(o_.alpha_regularizer_l2)},
            {"alpha_constraint", nullptr},
            {"shared_axes", o_.shared_axes.empty() ? json(nullptr) : json(o_.shared_axes)}};
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 2, "PReLU '", name(), "': expected an input of rank >= 2, got ", s.str());
    std::vector<int64_t> shape;
    for (int i = 1; i < s.rank(); ++i) shape.push_back(s[i]);
    for (int64_t a : o_.shared_axes) {
      LS_CHECK(a < s.rank(), "PReLU '", name(), "': shared axis ", a,
               " is not an axis of the input ", s.str(), " (1..", s.rank() - 1, ")");
      shape[size_t(a - 1)] = 1;
    }
    for (int64_t d : shape)
      LS_CHECK(d > 0, "PReLU '", name(),
               "': the input's axes after the batch must be known or "
               "shared, got ",
               s.str(), " with shared_axes ", Shape(o_.shared_axes).str());
    alpha_ = add_weight("alpha", Shape(shape), o_.alpha_initializer);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    add_l2(ctx, alpha_, o_.alpha_regularizer_l2);
    Value pos = g.add(op::relu, {x});
    Value neg = g.add(op::mul, {ctx.read(alpha_), g.add(op::relu, {g.add(op::neg, {x})})});
    return {g.add(op::sub, {pos, neg}, {}, name())};
  }

 private:
  layers::PReLUOptions o_;
  VariablePtr alpha_;
};

class RescalingLayer : public Layer {
 public:
  RescalingLayer(double scale, double offset, std::string name)
      : Layer(std::move(name)), scale_(scale), offset_(offset) {}
  std::string class_name() const override { return "Rescaling"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override { return {{"scale", scale_}, {"offset", offset_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    return {ctx.graph.add(op::scale_shift, {in.at(0)}, Attrs{{"scale", scale_}, {"shift", offset_}},
                          name())};
  }

 private:
  double scale_, offset_;
};

}  // namespace

namespace layers {

LayerHandle Activation(std::string activation, std::string name) {
  return LayerPtr(std::make_shared<ActivationLayer>(std::move(activation),
                                                    layer_util::default_name(name, "activation")));
}

LayerHandle ReLU(std::string name) { return ReLU(ReLUOptions{.name = std::move(name)}); }

LayerHandle ReLU(ReLUOptions o) {
  std::string name = layer_util::default_name(o.name, "re_lu");
  return LayerPtr(std::make_shared<ReLULayer>(std::move(o), std::move(name)));
}

LayerHandle LeakyReLU(double negative_slope, std::string name) {
  return LayerPtr(std::make_shared<LeakyReLULayer>(negative_slope,
                                                   layer_util::default_name(name, "leaky_re_lu")));
}

LayerHandle ELU(double alpha, std::string name) {
  return LayerPtr(std::make_shared<ELULayer>(alpha, layer_util::default_name(name, "elu")));
}

LayerHandle PReLU(PReLUOptions o) {
  std::string name = layer_util::default_name(o.name, "p_re_lu");
  return LayerPtr(std::make_shared<PReLULayer>(std::move(o), std::move(name)));
}

LayerHandle Rescaling(double scale, double offset, std::string name) {
  return LayerPtr(
      std::make_shared<RescalingLayer>(scale, offset, layer_util::default_name(name, "rescaling")));
}

}  // namespace layers
}  // namespace lockstep
