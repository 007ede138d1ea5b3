// Dense: kernel [in, units] and bias [units]; rank > 2 inputs apply to the last axis.
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

class DenseLayer : public Layer {
 public:
  DenseLayer(int64_t units, layers::DenseOptions o, std::string name)
      : Layer(std::move(name)), units_(units), o_(std::move(o)) {
    try {
      LS_CHECK(units_ > 0, "units must be positive, got ", units_);
      layer_util::check_activation(o_.activation);
      check_initializer(o_.kernel_initializer);
      check_initializer(o_.bias_initializer);
    } catch (const Error& e) {
      LS_FAIL("Dense '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "Dense"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    return {{"units", units_},
            {"activation", o_.activation.empty() ? "linear" : o_.activation},
            {"use_bias", o_.use_bias},
            {"kernel_initializer", layer_util::initializer_json(o_.kernel_initializer)},
            {"bias_initializer", layer_util::initializer_json(o_.bias_initializer)},
            {"kernel_regularizer", layer_util::regularizer_json(o_.kernel_regularizer_l2)},
            {"bias_regularizer", layer_util::regularizer_json(o_.bias_regularizer_l2)},
            {"kernel_constraint", nullptr},
            {"bias_constraint", nullptr}};
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 2, "expected input of rank >= 2 (batch, ..., features), got ", s.str());
    LS_CHECK(s[-1] > 0, "the last input dimension must be known, got ", s.str());
    kernel_ = add_weight("kernel", Shape{s[-1], units_}, o_.kernel_initializer);
    if (o_.use_bias) bias_ = add_weight("bias", Shape{units_}, o_.bias_initializer);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    Shape s = g.type(x).shape;
    LS_CHECK(s.rank() >= 2 && s[-1] == kernel_->value.dim(0), "expected input with ",
             kernel_->value.dim(0), " features on the last axis, got ", s.str());
    if (s.rank() > 2)
      x = g.add(op::reshape, {x}, Attrs{{"shape", std::vector<int64_t>{-1, s[-1]}}}, name());
    Value y = g.add(op::matmul, {x, ctx.read(kernel_)}, {}, name());
    if (bias_) y = g.add(op::bias_add, {y, ctx.read(bias_)}, {}, name());
    y = apply_activation(g, y, o_.activation, name());
    if (s.rank() > 2) {
      std::vector<int64_t> out = s.vec();
      out[0] = -1;
      out.back() = units_;
      y = g.add(op::reshape, {y}, Attrs{{"shape", out}}, name());
    }
    add_l2(ctx, kernel_, o_.kernel_regularizer_l2);
    if (bias_) add_l2(ctx, bias_, o_.bias_regularizer_l2);
    return {y};
  }

 private:
  int64_t units_;
  layers::DenseOptions o_;
  VariablePtr kernel_, bias_;
};

}  // namespace

namespace layers {

LayerHandle Dense(int64_t units, DenseOptions o) {
  std::string n = layer_util::default_name(o.name, "dense");
  return LayerPtr(std::make_shared<DenseLayer>(units, std::move(o), n));
}

}  // namespace layers
}  // namespace lockstep
