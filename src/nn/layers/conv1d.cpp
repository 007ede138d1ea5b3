// Conv1D and the 1D pooling layers. Each runs the 2D op over a unit height axis ([N, W, C] ->
// [N, 1, W, C]), so the cpu backend's oneDNN convolutions and pools, their gradients, the
// bias/activation fusions and the xla lowerings all apply; "causal" padding is the pad op.
#include "lockstep/nn/layers_1d.h"
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;
using layer_util::initializer_json;
using layer_util::regularizer_json;

// [N, W, C] checked (the steps and channels known), for `who`'s messages.
Shape check_rank3(const Layer& l, const Shape& s) {
  LS_CHECK(s.rank() == 3, l.class_name(), " '", l.name(),
           "': expected input of rank 3 (batch, steps, channels), got ", s.str());
  LS_CHECK(s[1] > 0 && s[2] > 0, l.class_name(), " '", l.name(),
           "': the steps and channels must be known, got ", s.str());
  return s;
}

// x [N, W, C] -> [N, 1, W, C], and back from [N, 1, W', C'].
Value to_2d(Graph& g, Value x, const std::string& name) {
  const Shape s = g.type(x).shape;
  return g.add(op::reshape, {x}, Attrs{{"shape", I{-1, 1, s[1], s[2]}}}, name);
}
Value from_2d(Graph& g, Value y, const std::string& name) {
  const Shape s = g.type(y).shape;
  return g.add(op::reshape, {y}, Attrs{{"shape", I{-1, s[2], s[3]}}}, name);
}

class Conv1DLayer : public Layer {
 public:
  Conv1DLayer(int64_t filters, int64_t k, layers::Conv1DOptions o, std::string name)
      : Layer(std::move(name)), filters_(filters), k_(k), o_(std::move(o)) {
    try {
      LS_CHECK(filters_ > 0, "filters must be positive, got ", filters_);
      LS_CHECK(k_ > 0, "kernel_size must be positive, got ", k_);
      LS_CHECK(o_.strides > 0, "strides must be positive, got ", o_.strides);
      LS_CHECK(o_.dilation_rate > 0, "dilation_rate must be positive, got ", o_.dilation_rate);
      LS_CHECK(o_.padding == "valid" || o_.padding == "same" || o_.padding == "causal",
               "padding must be \"valid\", \"same\" or \"causal\", got \"", o_.padding, "\"");
      LS_CHECK(o_.strides == 1 || o_.dilation_rate == 1,
               "strides > 1 not supported in conjunction with dilation_rate > 1; got strides=",
               o_.strides, " and dilation_rate=", o_.dilation_rate);
      LS_CHECK(o_.groups >= 1, "groups must be >= 1, got ", o_.groups);
      LS_CHECK(filters_ % o_.groups == 0, "filters (", filters_, ") must be divisible by groups (",
               o_.groups, ")");
      layer_util::check_activation(o_.activation);
      check_initializer(o_.kernel_initializer);
      check_initializer(o_.bias_initializer);
    } catch (const Error& e) {
      LS_FAIL("Conv1D '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "Conv1D"; }
  json layer_config() const override {
    return {{"filters", filters_},
            {"kernel_size", I{k_}},
            {"strides", I{o_.strides}},
            {"padding", o_.padding},
            {"data_format", "channels_last"},
            {"dilation_rate", I{o_.dilation_rate}},
            {"groups", o_.groups},
            {"activation", o_.activation.empty() ? "linear" : o_.activation},
            {"use_bias", o_.use_bias},
            {"kernel_initializer", initializer_json(o_.kernel_initializer)},
            {"bias_initializer", initializer_json(o_.bias_initializer)},
            {"kernel_regularizer", regularizer_json(o_.kernel_regularizer_l2)},
            {"bias_regularizer", regularizer_json(o_.bias_regularizer_l2)},
            {"activity_regularizer", nullptr},
            {"kernel_constraint", nullptr},
            {"bias_constraint", nullptr}};
  }
  void build(const std::vector<Shape>& in) override {
    const Shape s = check_rank3(*this, in.at(0));
    LS_CHECK(s[2] % o_.groups == 0, "Conv1D '", name(), "': input channels (", s[2],
             ") are not divisible by groups (", o_.groups, "); input shape ", s.str());
    channels_ = s[2];
    kernel_ =
        add_weight("kernel", Shape{k_, channels_ / o_.groups, filters_}, o_.kernel_initializer);
    if (o_.use_bias) bias_ = add_weight("bias", Shape{filters_}, o_.bias_initializer);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const Shape s = check_rank3(*this, g.type(x).shape);
    LS_CHECK(s[2] == channels_, "Conv1D '", name(), "': expected input (batch, steps, ", channels_,
             "), got ", s.str());
    std::string padding = o_.padding;
    if (padding == "causal") {  // dilation * (k - 1) zeros ahead: step t sees steps <= t
      x = g.add(op::pad, {x},
                Attrs{{"before", I{0, o_.dilation_rate * (k_ - 1), 0}}, {"after", I{0, 0, 0}}},
                name());
      padding = "valid";
    }
    const int64_t reach = o_.dilation_rate * (k_ - 1) + 1, steps = g.type(x).shape[1];
    LS_CHECK(padding == "same" || steps >= reach, "Conv1D '", name(), "': the input has ", steps,
             " steps, fewer than the kernel's reach of ", reach, " (kernel_size ", k_,
             ", dilation_rate ", o_.dilation_rate,
             "): use padding \"same\" or \"causal\", or longer sequences");
    Value w = g.add(op::reshape, {ctx.read(kernel_)},
                    Attrs{{"shape", I{1, k_, channels_ / o_.groups, filters_}}}, name());
    Value y = g.add(op::conv2d, {to_2d(g, x, name()), w},
                    Attrs{{"strides", I{1, o_.strides}},
                          {"padding", padding},
                          {"dilations", I{1, o_.dilation_rate}},
                          {"groups", o_.groups}},
                    name());
    if (bias_) y = g.add(op::bias_add, {y, ctx.read(bias_)}, {}, name());
    y = apply_activation(g, y, o_.activation, name());
    add_l2(ctx, kernel_, o_.kernel_regularizer_l2);
    if (bias_) add_l2(ctx, bias_, o_.bias_regularizer_l2);
    return {from_2d(g, y, name())};
  }

 private:
  int64_t filters_, k_;
  layers::Conv1DOptions o_;
  int64_t channels_ = 0;
  VariablePtr kernel_, bias_;
};

class Pool1D : public Layer {
 public:
  Pool1D(bool max, int64_t pool, layers::Pool1DOptions o, std::string name)
      : Layer(std::move(name)), max_(max), pool_(pool), o_(std::move(o)) {
    strides_ = o_.strides == 0 ? pool_ : o_.strides;
    LS_CHECK(pool_ > 0 && strides_ > 0, class_name(), " '", this->name(),
             "': pool_size and strides must be positive, got pool_size=", pool_,
             " strides=", strides_);
    try {
      layer_util::check_padding(o_.padding);
    } catch (const Error& e) {
      LS_FAIL(class_name(), " '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return max_ ? "MaxPooling1D" : "AveragePooling1D"; }
  json layer_config() const override {
    return {{"pool_size", I{pool_}},
            {"padding", o_.padding},
            {"strides", I{strides_}},
            {"data_format", "channels_last"}};
  }
  void build(const std::vector<Shape>& in) override { check_rank3(*this, in.at(0)); }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = check_rank3(*this, g.type(in.at(0)).shape);
    LS_CHECK(o_.padding == "same" || s[1] >= pool_, class_name(), " '", name(), "': the input has ",
             s[1], " steps, fewer than pool_size ", pool_, ": use padding \"same\"");
    Value y = g.add(
        max_ ? op::max_pool2d : op::avg_pool2d, {to_2d(g, in[0], name())},
        Attrs{{"pool_size", I{1, pool_}}, {"strides", I{1, strides_}}, {"padding", o_.padding}},
        name());
    return {from_2d(g, y, name())};
  }

 private:
  bool max_;
  int64_t pool_, strides_ = 0;
  layers::Pool1DOptions o_;
};

// GlobalAveragePooling1D / GlobalMaxPooling1D. Both take a masked input (Keras's
// supports_masking); the average counts only the unmasked steps, the maximum (as Keras 3's
// GlobalMaxPooling1D) takes every step. Neither passes a mask on.
class GlobalPool1D : public Layer {
 public:
  GlobalPool1D(bool max, bool keepdims, std::string name)
      : Layer(std::move(name)), max_(max), keepdims_(keepdims) {}
  std::string class_name() const override {
    return max_ ? "GlobalMaxPooling1D" : "GlobalAveragePooling1D";
  }
  json layer_config() const override {
    return {{"data_format", "channels_last"}, {"keepdims", keepdims_}};
  }
  bool supports_masking() const override { return true; }
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>&,
                                  const std::vector<Value>&, int num_outputs) override {
    return std::vector<Value>(size_t(num_outputs));
  }
  void build(const std::vector<Shape>& in) override { check_rank3(*this, in.at(0)); }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = check_rank3(*this, g.type(in.at(0)).shape);
    const Attrs over_steps{{"axes", I{1}}, {"keepdims", keepdims_}};
    const Value mask = ctx.masks.empty() ? Value{} : ctx.masks[0];
    if (max_ || !mask.valid())
      return {g.add(max_ ? op::reduce_max : op::reduce_mean, {in[0]}, over_steps, name())};
    // sum(x * m) / sum(m) over the steps, m the mask as [N, W, 1] in x's dtype.
    Value m = g.add(op::reshape, {mask}, Attrs{{"shape", I{-1, s[1], 1}}}, name());
    const DType dt = g.type(in[0]).dtype;
    if (g.type(m).dtype != dt)
      m = g.add(op::cast, {m}, Attrs{{"dtype", std::string(dtype_name(dt))}}, name());
    Value sum = g.add(op::reduce_sum, {g.add(op::mul, {in[0], m}, {}, name())}, over_steps, name());
    Value count = g.add(op::reduce_sum, {m}, over_steps, name());
    return {g.add(op::div, {sum, count}, {}, name())};
  }

 private:
  bool max_, keepdims_;
};

}  // namespace

namespace layers {

LayerHandle Conv1D(int64_t filters, int64_t kernel_size, Conv1DOptions o) {
  std::string n = layer_util::default_name(o.name, "conv1d");
  return LayerPtr(std::make_shared<Conv1DLayer>(filters, kernel_size, std::move(o), n));
}

LayerHandle MaxPooling1D(int64_t pool_size, Pool1DOptions o) {
  std::string n = layer_util::default_name(o.name, "max_pooling1d");
  return LayerPtr(std::make_shared<Pool1D>(true, pool_size, std::move(o), n));
}

LayerHandle AveragePooling1D(int64_t pool_size, Pool1DOptions o) {
  std::string n = layer_util::default_name(o.name, "average_pooling1d");
  return LayerPtr(std::make_shared<Pool1D>(false, pool_size, std::move(o), n));
}

LayerHandle GlobalAveragePooling1D(bool keepdims, std::string name) {
  return LayerPtr(std::make_shared<GlobalPool1D>(
      false, keepdims, layer_util::default_name(name, "global_average_pooling1d")));
}

LayerHandle GlobalMaxPooling1D(bool keepdims, std::string name) {
  return LayerPtr(std::make_shared<GlobalPool1D>(
      true, keepdims, layer_util::default_name(name, "global_max_pooling1d")));
}

}  // namespace layers
}  // namespace lockstep
