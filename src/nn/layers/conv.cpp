// Convolutions: Conv2D, DepthwiseConv2D, SeparableConv2D (NHWC, HWIO kernels as Keras) and
// Conv2DTranspose (conv2d's input gradient, kernel [kh, kw, filters, C] as Keras).
#include <optional>

#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

using layer_util::initializer_json;
using layer_util::regularizer_json;

enum class ConvKind { kConv, kDepthwise, kSeparable };

class ConvLayer : public Layer {
 public:
  ConvLayer(ConvKind kind, int64_t filters, std::vector<int64_t> kernel_size, layers::ConvOptions o,
            std::string name)
      : Layer(std::move(name)), kind_(kind), filters_(filters), o_(std::move(o)) {
    try {
      kernel_ = layer_util::pair(kernel_size, "kernel_size");
      strides_ = layer_util::pair(o_.strides, "strides");
      dilation_ = layer_util::pair(o_.dilation_rate, "dilation_rate");
      layer_util::check_padding(o_.padding);
      layer_util::check_activation(o_.activation);
      if (kind_ != ConvKind::kDepthwise) {
        LS_CHECK(filters_ > 0, "filters must be positive, got ", filters_);
      }
      LS_CHECK(o_.groups >= 1, "groups must be >= 1, got ", o_.groups);
      LS_CHECK(kind_ == ConvKind::kConv || o_.groups == 1, "groups is only supported by Conv2D");
      LS_CHECK(filters_ % o_.groups == 0 || kind_ == ConvKind::kDepthwise, "filters (", filters_,
               ") must be divisible by groups (", o_.groups, ")");
      LS_CHECK(o_.depth_multiplier >= 1, "depth_multiplier must be >= 1, got ",
               o_.depth_multiplier);
      LS_CHECK(std::max(strides_[0], strides_[1]) == 1 || std::max(dilation_[0], dilation_[1]) == 1,
               "strides > 1 not supported in conjunction with dilation_rate > 1; got strides=[",
               strides_[0], ", ", strides_[1], "] and dilation_rate=[", dilation_[0], ", ",
               dilation_[1], "]");
      for (auto* i : {&o_.kernel_initializer, &o_.bias_initializer, &o_.depthwise_initializer,
                      &o_.pointwise_initializer})
        check_initializer(*i);
    } catch (const Error& e) {
      LS_FAIL(class_name(), " '", this->name(), "': ", e.what());
    }
  }

  std::string class_name() const override {
    switch (kind_) {
      case ConvKind::kConv:
        return "Conv2D";
      case ConvKind::kDepthwise:
        return "DepthwiseConv2D";
      default:
        return "SeparableConv2D";
    }
  }

  json layer_config() const override {
    json c;
    if (kind_ != ConvKind::kDepthwise) c["filters"] = filters_;
    c["kernel_size"] = kernel_;
    c["strides"] = strides_;
    c["padding"] = o_.padding;
    c["data_format"] = "channels_last";
    c["dilation_rate"] = dilation_;
    if (kind_ == ConvKind::kConv)
      c["groups"] = o_.groups;
    else
      c["depth_multiplier"] = o_.depth_multiplier;
    c["activation"] = o_.activation.empty() ? "linear" : o_.activation;
    c["use_bias"] = o_.use_bias;
    if (kind_ == ConvKind::kConv) {
      c["kernel_initializer"] = initializer_json(o_.kernel_initializer);
    } else {
      c["depthwise_initializer"] = initializer_json(o_.depthwise_initializer);
      if (kind_ == ConvKind::kSeparable)
        c["pointwise_initializer"] = initializer_json(o_.pointwise_initializer);
    }
    c["bias_initializer"] = initializer_json(o_.bias_initializer);
    if (kind_ == ConvKind::kConv) {
      c["kernel_regularizer"] = regularizer_json(o_.kernel_regularizer_l2);
    } else {
      c["depthwise_regularizer"] = regularizer_json(o_.kernel_regularizer_l2);
      if (kind_ == ConvKind::kSeparable)
        c["pointwise_regularizer"] = regularizer_json(o_.kernel_regularizer_l2);
    }
    c["bias_regularizer"] = regularizer_json(o_.bias_regularizer_l2);
    c["activity_regularizer"] = nullptr;
    if (kind_ == ConvKind::kConv) {
      c["kernel_constraint"] = nullptr;
    } else {
      c["depthwise_constraint"] = nullptr;
      if (kind_ == ConvKind::kSeparable) c["pointwise_constraint"] = nullptr;
    }
    c["bias_constraint"] = nullptr;
    return c;
  }

  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    if (s.rank() != 4) {
      std::string hint;
      if (s.rank() == 3)
        hint = " — add a channel axis, e.g. Input({" + std::to_string(s[1]) + ", " +
               std::to_string(s[2]) + ", 1})";
      LS_FAIL("expected input of rank 4 (batch, height, width, channels), got ", s.str(), hint);
    }
    const int64_t C = s[3];
    LS_CHECK(C > 0, "the channel dimension must be known, got ", s.str());
    const int64_t kh = kernel_[0], kw = kernel_[1];
    if (kind_ == ConvKind::kConv) {
      LS_CHECK(C % o_.groups == 0, "input channels (", C, ") are not divisible by groups (",
               o_.groups, "); input shape ", s.str());
      kernel_w_ =
          add_weight("kernel", Shape{kh, kw, C / o_.groups, filters_}, o_.kernel_initializer);
      if (o_.use_bias) bias_ = add_weight("bias", Shape{filters_}, o_.bias_initializer);
    } else if (kind_ == ConvKind::kDepthwise) {
      kernel_w_ =
          add_weight("kernel", Shape{kh, kw, C, o_.depth_multiplier}, o_.depthwise_initializer);
      if (o_.use_bias)
        bias_ = add_weight("bias", Shape{C * o_.depth_multiplier}, o_.bias_initializer);
    } else {
      kernel_w_ = add_weight("depthwise_kernel", Shape{kh, kw, C, o_.depth_multiplier},
                             o_.depthwise_initializer);
      pointwise_ = add_weight("pointwise_kernel", Shape{1, 1, C * o_.depth_multiplier, filters_},
                              o_.pointwise_initializer);
      if (o_.use_bias) bias_ = add_weight("bias", Shape{filters_}, o_.bias_initializer);
    }
    in_channels_ = C;
  }

  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const Shape s = g.type(x).shape;
    LS_CHECK(s.rank() == 4 && s[3] == in_channels_, "expected input (batch, height, width, ",
             in_channels_, "), got ", s.str());
    Attrs a{{"strides", strides_},
            {"padding", o_.padding},
            {"dilations", dilation_},
            {"groups", o_.groups}};
    Value w = ctx.read(kernel_w_);
    if (kind_ != ConvKind::kConv) {
      // [kh, kw, C, m] -> [kh, kw, 1, C*m]: a grouped conv with one group per input channel.
      const int64_t m = o_.depth_multiplier;
      w = g.add(op::reshape, {w},
                Attrs{{"shape", std::vector<int64_t>{kernel_[0], kernel_[1], 1, in_channels_ * m}}},
                name());
      a.set("groups", AttrValue(in_channels_));
    }
    Value y = g.add(op::conv2d, {x, w}, a, name());
    if (kind_ == ConvKind::kSeparable) {
      Attrs p{{"strides", std::vector<int64_t>{1, 1}},
              {"padding", std::string("valid")},
              {"dilations", std::vector<int64_t>{1, 1}},
              {"groups", int64_t(1)}};
      y = g.add(op::conv2d, {y, ctx.read(pointwise_)}, p, name());
    }
    if (bias_) y = g.add(op::bias_add, {y, ctx.read(bias_)}, {}, name());
    y = apply_activation(g, y, o_.activation, name());
    add_l2(ctx, kernel_w_, o_.kernel_regularizer_l2);
    if (pointwise_) add_l2(ctx, pointwise_, o_.kernel_regularizer_l2);
    if (bias_) add_l2(ctx, bias_, o_.bias_regularizer_l2);
    return {y};
  }

 private:
  ConvKind kind_;
  int64_t filters_;
  layers::ConvOptions o_;
  std::vector<int64_t> kernel_, strides_, dilation_;
  int64_t in_channels_ = 0;
  VariablePtr kernel_w_, pointwise_, bias_;
};

// One spatial axis of keras.layers.Conv2DTranspose, from Keras's JAX padding rule
// (_convert_conv_transpose_padding_args_from_keras_to_jax): the transposed convolution pads the
// stride-dilated input by (lo, hi); as the input gradient of a forward convolution of an
// output-sized x, that is pads (eff - 1 - lo, max(eff - 1 - hi, 0)) on x (hi's excess is the
// forward window's slack, which the forward output count ignores) and x's length
// (in - 1) * stride + lo + hi - eff + 2.
struct TransposeAxis {
  int64_t out, pad_lo, pad_hi;
};
TransposeAxis transpose_axis(int64_t in, int64_t k, int64_t stride, int64_t dil,
                             const std::string& padding, std::optional<int64_t> output_padding) {
  const int64_t eff = (k - 1) * dil + 1;
  int64_t lo, hi;
  if (padding == "valid") {
    const int64_t op = output_padding ? *output_padding : std::max(eff, stride) - eff;
    lo = eff - 1;
    hi = eff - 1 + op;
  } else {
    const int64_t len = output_padding ? eff + eff % 2 - 2 + *output_padding : stride + eff - 2;
    lo = std::min(len / 2 + len % 2, eff - 1);
    hi = len - lo;
  }
  return {(in - 1) * stride + lo + hi - eff + 2, eff - 1 - lo, std::max<int64_t>(eff - 1 - hi, 0)};
}

// keras.layers.Conv2DTranspose: y = conv2d_backward_input(x, kernel) with explicit pads, so
// the forward runs the conv backends' input-gradient kernels (oneDNN on cpu) and its gradients
// are conv2d (for x) and conv2d_backward_filter (for the kernel).
class ConvTransposeLayer : public Layer {
 public:
  ConvTransposeLayer(int64_t filters, std::vector<int64_t> kernel_size, layers::ConvOptions o,
                     std::string name)
      : Layer(std::move(name)), filters_(filters), o_(std::move(o)) {
    try {
      kernel_ = layer_util::pair(kernel_size, "kernel_size");
      strides_ = layer_util::pair(o_.strides, "strides");
      dilation_ = layer_util::pair(o_.dilation_rate, "dilation_rate");
      layer_util::check_padding(o_.padding);
      layer_util::check_activation(o_.activation);
      LS_CHECK(filters_ > 0, "filters must be positive, got ", filters_);
      LS_CHECK(o_.groups == 1, "groups is not an argument of Conv2DTranspose (got ", o_.groups,
               ")");
      LS_CHECK(o_.depth_multiplier == 1, "depth_multiplier is not an argument of Conv2DTranspose");
      if (!o_.output_padding.empty()) {
        const auto& p = o_.output_padding;
        LS_CHECK(p.size() == 1 || p.size() == 2, "output_padding needs 1 or 2 values, got ",
                 p.size());
        output_padding_ = p.size() == 1 ? std::vector<int64_t>{p[0], p[0]} : p;
        for (int i = 0; i < 2; ++i)
          LS_CHECK((*output_padding_)[i] >= 0 && (*output_padding_)[i] < strides_[i],
                   "output_padding must be >= 0 and less than strides (Keras's rule), got "
                   "output_padding=[",
                   (*output_padding_)[0], ", ", (*output_padding_)[1], "] with strides=[",
                   strides_[0], ", ", strides_[1], "]");
      }
      for (auto* i : {&o_.kernel_initializer, &o_.bias_initializer}) check_initializer(*i);
    } catch (const Error& e) {
      LS_FAIL(class_name(), " '", this->name(), "': ", e.what());
    }
  }

  std::string class_name() const override { return "Conv2DTranspose"; }

  json layer_config() const override {
    json c;
    c["filters"] = filters_;
    c["kernel_size"] = kernel_;
    c["strides"] = strides_;
    c["padding"] = o_.padding;
    c["output_padding"] = output_padding_ ? json(*output_padding_) : json(nullptr);
    c["data_format"] = "channels_last";
    c["dilation_rate"] = dilation_;
    c["activation"] = o_.activation.empty() ? "linear" : o_.activation;
    c["use_bias"] = o_.use_bias;
    c["kernel_initializer"] = initializer_json(o_.kernel_initializer);
    c["bias_initializer"] = initializer_json(o_.bias_initializer);
    c["kernel_regularizer"] = regularizer_json(o_.kernel_regularizer_l2);
    c["bias_regularizer"] = regularizer_json(o_.bias_regularizer_l2);
    c["activity_regularizer"] = nullptr;
    c["kernel_constraint"] = nullptr;
    c["bias_constraint"] = nullptr;
    return c;
  }

  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() == 4, class_name(), " '", name(),
             "': expected input of rank 4 (batch, height, width, channels), got ", s.str());
    LS_CHECK(s[3] > 0, class_name(), " '", name(), "': the channel dimension must be known, got ",
             s.str());
    in_channels_ = s[3];
    // Keras's layout: [kh, kw, filters (out), channels (in)], conv2d's filter for the forward
    // convolution this layer transposes.
    kernel_w_ = add_weight("kernel", Shape{kernel_[0], kernel_[1], filters_, in_channels_},
                           o_.kernel_initializer);
    if (o_.use_bias) bias_ = add_weight("bias", Shape{filters_}, o_.bias_initializer);
  }

  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const Shape s = g.type(x).shape;
    LS_CHECK(s.rank() == 4 && s[3] == in_channels_, class_name(), " '", name(),
             "': expected input (batch, height, width, ", in_channels_, "), got ", s.str());
    LS_CHECK(s[1] > 0 && s[2] > 0, class_name(), " '", name(),
             "': height and width must be known, got ", s.str());
    std::vector<int64_t> pads, xs{s[0], 0, 0, filters_};
    for (int i = 0; i < 2; ++i) {
      std::optional<int64_t> op;
      if (output_padding_) op = (*output_padding_)[i];
      TransposeAxis t =
          transpose_axis(s[1 + i], kernel_[i], strides_[i], dilation_[i], o_.padding, op);
      LS_CHECK(t.out > 0, class_name(), " '", name(), "': the output would be empty (", t.out,
               ") on axis ", i + 1, " of input ", s.str());
      xs[1 + i] = t.out;
      pads.push_back(t.pad_lo);
      pads.push_back(t.pad_hi);
    }
    Value y = g.add(op::conv2d_backward_input, {x, ctx.read(kernel_w_)},
                    Attrs{{"strides", strides_},
                          {"pads", std::vector<int64_t>{pads[0], pads[1], pads[2], pads[3]}},
                          {"dilations", dilation_},
                          {"input_shape", xs}},
                    name());
    if (bias_) y = g.add(op::bias_add, {y, ctx.read(bias_)}, {}, name());
    y = apply_activation(g, y, o_.activation, name());
    add_l2(ctx, kernel_w_, o_.kernel_regularizer_l2);
    if (bias_) add_l2(ctx, bias_, o_.bias_regularizer_l2);
    return {y};
  }

 private:
  int64_t filters_;
  layers::ConvOptions o_;
  std::vector<int64_t> kernel_, strides_, dilation_;
  std::optional<std::vector<int64_t>> output_padding_;
  int64_t in_channels_ = 0;
  VariablePtr kernel_w_, bias_;
};

}  // namespace

namespace layers {

LayerHandle Conv2DTranspose(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o) {
  std::string n = layer_util::default_name(o.name, "conv2d_transpose");
  return LayerPtr(
      std::make_shared<ConvTransposeLayer>(filters, std::move(kernel_size), std::move(o), n));
}

LayerHandle Conv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o) {
  std::string n = layer_util::default_name(o.name, "conv2d");
  return LayerPtr(std::make_shared<ConvLayer>(ConvKind::kConv, filters, std::move(kernel_size),
                                              std::move(o), n));
}

LayerHandle DepthwiseConv2D(std::vector<int64_t> kernel_size, ConvOptions o) {
  std::string n = layer_util::default_name(o.name, "depthwise_conv2d");
  return LayerPtr(std::make_shared<ConvLayer>(ConvKind::kDepthwise, 0, std::move(kernel_size),
                                              std::move(o), n));
}

LayerHandle SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions o) {
  std::string n = layer_util::default_name(o.name, "separable_conv2d");
  return LayerPtr(std::make_shared<ConvLayer>(ConvKind::kSeparable, filters, std::move(kernel_size),
                                              std::move(o), n));
}

}  // namespace layers
}  // namespace lockstep
