// Layers with kernels: Dense (Gemm, or MatMul + Add on rank > 2), Conv2D, DepthwiseConv2D and
// SeparableConv2D (Conv, NCHW, OIHW weights), each with an optional BatchNormalization folded
// into its kernel and bias; Conv2DTranspose (ConvTranspose, never folded).
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

// kernel *= scale per output channel (the fastest-varying channel index is the output channel
// in every Keras kernel layout used here); bias = bias * scale + shift.
void fold(std::vector<float>& kernel, std::vector<float>& bias, int64_t out_channels,
          const ConvertCall& c) {
  if (bias.empty()) bias.assign(size_t(out_channels), 0.f);
  if (!c.fold_batch_norm) return;
  ChannelAffine a = batch_norm_affine(*c.fold_batch_norm);
  LS_CHECK(int64_t(a.scale.size()) == out_channels, "ONNX export: BatchNormalization '",
           c.fold_batch_norm->name(), "' has ", a.scale.size(), " channels, '", c.name(),
           "' produces ", out_channels);
  for (size_t i = 0; i < kernel.size(); ++i) kernel[i] *= a.scale[i % size_t(out_channels)];
  for (size_t o = 0; o < bias.size(); ++o) bias[o] = bias[o] * a.scale[o] + a.shift[o];
}

// The same for an OIHW kernel, whose output channel is the slowest index. A kernel without a
// bias keeps none unless a BatchNormalization brings one.
void fold_oihw(std::vector<float>& kernel, std::vector<float>& bias, int64_t out_channels,
               const ConvertCall& c) {
  if (!c.fold_batch_norm) return;
  if (bias.empty()) bias.assign(size_t(out_channels), 0.f);
  ChannelAffine a = batch_norm_affine(*c.fold_batch_norm);
  LS_CHECK(int64_t(a.scale.size()) == out_channels, "ONNX export: BatchNormalization '",
           c.fold_batch_norm->name(), "' has ", a.scale.size(), " channels, '", c.name(),
           "' produces ", out_channels);
  const size_t block = kernel.size() / size_t(out_channels);
  for (size_t i = 0; i < kernel.size(); ++i) kernel[i] *= a.scale[i / block];
  for (size_t o = 0; o < bias.size(); ++o) bias[o] = bias[o] * a.scale[o] + a.shift[o];
}

std::vector<float> bias_of(const ConvertCall& c) {
  const Tensor* b = find_weight(c.layer(), "bias");
  return b ? b->to_vector() : std::vector<float>{};
}

std::vector<OnnxValue> dense(ConvertCall& c) {
  const Tensor& k = weight(c.layer(), "kernel");
  const int64_t in = k.dim(0), units = k.dim(1);
  std::vector<float> kernel = k.to_vector(), bias = bias_of(c);
  const bool has_bias = !bias.empty() || c.fold_batch_norm;
  fold(kernel, bias, units, c);
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsLast);
  std::string w = b.constant(c.name() + "/kernel", kernel, {in, units});
  std::string y;
  if (x.shape.rank() == 2) {
    std::vector<std::string> ins{x.name, w};
    if (has_bias) ins.push_back(b.constant(c.name() + "/bias", bias, {units}));
    y = b.add("Gemm", ins, c.name());
  } else {  // Keras's Dense on rank > 2: the last axis
    y = b.add(declared_onnx_op(op::matmul), {x.name, w}, c.name());
    if (has_bias) y = b.add("Add", {y, b.constant(c.name() + "/bias", bias, {units})}, c.name());
  }
  OnnxValue out = c.output(y, Layout::kChannelsLast);
  return {apply_activation(b, out, c.config.value("activation", "linear"), c.name())};
}

// Keras HWIO [kh, kw, in, out] -> ONNX OIHW [out, in, kh, kw].
std::vector<float> hwio_to_oihw(const Tensor& k) {
  const int64_t kh = k.dim(0), kw = k.dim(1), ci = k.dim(2), co = k.dim(3);
  std::vector<float> src = k.to_vector(), dst(src.size());
  for (int64_t h = 0; h < kh; ++h)
    for (int64_t w = 0; w < kw; ++w)
      for (int64_t i = 0; i < ci; ++i)
        for (int64_t o = 0; o < co; ++o)
          dst[size_t(((o * ci + i) * kh + h) * kw + w)] =
              src[size_t(((h * kw + w) * ci + i) * co + o)];
  return dst;
}

std::vector<int64_t> pair_of(const json& v) { return v.get<std::vector<int64_t>>(); }

// One ONNX Conv (NCHW) with OIHW weights; `bias` may be empty.
OnnxValue conv(ConvertCall& c, const OnnxValue& x_in, const std::vector<float>& oihw,
               const std::vector<int64_t>& dims, const std::vector<float>& bias, int64_t group,
               const std::vector<int64_t>& strides, const std::vector<int64_t>& dilations,
               const std::string& padding, const std::string& base, const Shape& out_shape) {
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(x_in, Layout::kChannelsFirst);
  std::vector<std::string> ins{x.name, b.constant(base + "/kernel", oihw, dims)};
  if (!bias.empty()) ins.push_back(b.constant(base + "/bias", bias, {dims[0]}));
  const std::vector<int64_t> kernel{dims[2], dims[3]};
  pb::NodeProto& n = b.node(declared_onnx_op(op::conv2d), ins, base);
  set_attr(n, "kernel_shape", kernel);
  set_attr(n, "strides", strides);
  set_attr(n, "dilations", dilations);
  set_attr(n, "pads", spatial_pads(x.shape, kernel, strides, dilations, padding));
  set_attr(n, "group", group);
  return OnnxValue{n.output(0), out_shape, Layout::kChannelsFirst};
}

std::vector<OnnxValue> conv2d(ConvertCall& c) {
  const Tensor& k = weight(c.layer(), "kernel");
  const int64_t co = k.dim(3);
  std::vector<float> kernel = hwio_to_oihw(k), bias = bias_of(c);
  fold_oihw(kernel, bias, co, c);
  const json& cfg = c.config;
  OnnxValue y =
      conv(c, c.inputs.at(0), kernel, {co, k.dim(2), k.dim(0), k.dim(1)}, bias,
           cfg.value("groups", int64_t(1)), pair_of(cfg.at("strides")),
           pair_of(cfg.at("dilation_rate")), cfg.at("padding"), c.name(), c.output_shape());
  return {apply_activation(c.b, y, cfg.value("activation", "linear"), c.name())};
}

// Keras depthwise [kh, kw, C, m] -> ONNX [C*m, 1, kh, kw] (group C; output channel c*m + j).
std::vector<float> depthwise_to_oihw(const Tensor& k) {
  const int64_t kh = k.dim(0), kw = k.dim(1), channels = k.dim(2), m = k.dim(3);
  std::vector<float> src = k.to_vector(), dst(src.size());
  for (int64_t h = 0; h < kh; ++h)
    for (int64_t w = 0; w < kw; ++w)
      for (int64_t ch = 0; ch < channels * m; ++ch)
        dst[size_t((ch * kh + h) * kw + w)] = src[size_t((h * kw + w) * channels * m + ch)];
  return dst;
}

std::vector<OnnxValue> depthwise_conv2d(ConvertCall& c) {
  const Tensor& k = weight(c.layer(), "kernel");
  const int64_t channels = k.dim(2), out = k.dim(2) * k.dim(3);
  std::vector<float> kernel = depthwise_to_oihw(k), bias = bias_of(c);
  fold_oihw(kernel, bias, out, c);
  const json& cfg = c.config;
  OnnxValue y = conv(c, c.inputs.at(0), kernel, {out, 1, k.dim(0), k.dim(1)}, bias, channels,
                     pair_of(cfg.at("strides")), pair_of(cfg.at("dilation_rate")),
                     cfg.at("padding"), c.name(), c.output_shape());
  return {apply_activation(c.b, y, cfg.value("activation", "linear"), c.name())};
}

std::vector<OnnxValue> separable_conv2d(ConvertCall& c) {
  const Tensor& dk = weight(c.layer(), "depthwise_kernel");
  const Tensor& pk = weight(c.layer(), "pointwise_kernel");  // [1, 1, C*m, filters]
  const int64_t mid = dk.dim(2) * dk.dim(3), filters = pk.dim(3);
  const json& cfg = c.config;
  Shape mid_shape = c.output_shape();
  mid_shape[3] = mid;
  OnnxValue d = conv(c, c.inputs.at(0), depthwise_to_oihw(dk), {mid, 1, dk.dim(0), dk.dim(1)}, {},
                     dk.dim(2), pair_of(cfg.at("strides")), pair_of(cfg.at("dilation_rate")),
                     cfg.at("padding"), c.name() + "/depthwise", mid_shape);
  // The pointwise kernel [C*m, filters] flattened has the output channel fastest: fold there.
  std::vector<float> pointwise = pk.to_vector(), bias = bias_of(c);
  if (c.fold_batch_norm) fold(pointwise, bias, filters, c);
  std::vector<float> oihw(pointwise.size());
  for (int64_t i = 0; i < mid; ++i)
    for (int64_t o = 0; o < filters; ++o)
      oihw[size_t(o * mid + i)] = pointwise[size_t(i * filters + o)];
  OnnxValue y = conv(c, d, oihw, {filters, mid, 1, 1}, bias, 1, {1, 1}, {1, 1}, "valid",
                     c.name() + "/pointwise", c.output_shape());
  return {apply_activation(c.b, y, cfg.value("activation", "linear"), c.name())};
}

// Conv2DTranspose: ConvTranspose (NCHW). Keras's kernel [kh, kw, filters, C] read as HWIO
// gives [C, filters, kh, kw], ConvTranspose's [in, out, kh, kw]. pads: the full transposed
// output cropped by pt at the start (Keras's rule, as src/nn/layers/conv.cpp's transpose_axis)
// and by whatever makes it the layer's size at the end; a negative end crop (valid padding
// with stride > kernel, or output_padding) is output_padding.
std::vector<OnnxValue> conv2d_transpose(ConvertCall& c) {
  const Tensor& k = weight(c.layer(), "kernel");
  const json& cfg = c.config;
  const auto strides = pair_of(cfg.at("strides")), dil = pair_of(cfg.at("dilation_rate"));
  const std::string padding = cfg.at("padding");
  const json& op = cfg.at("output_padding");
  const Shape in = c.inputs.at(0).shape, out = c.output_shape();
  std::vector<int64_t> begin(2), end(2), extra(2);
  for (int i = 0; i < 2; ++i) {
    const int64_t eff = (k.dim(i) - 1) * dil[size_t(i)] + 1, s = strides[size_t(i)];
    int64_t lo = eff - 1;  // valid
    if (padding == "same") {
      const int64_t len =
          op.is_null() ? s + eff - 2
                       : eff + eff % 2 - 2 +
                             (op.is_array() ? op[size_t(i)].get<int64_t>() : op.get<int64_t>());
      lo = std::min(len / 2 + len % 2, eff - 1);
    }
    begin[size_t(i)] = eff - 1 - lo;
    const int64_t e = s * (in[1 + i] - 1) + eff - begin[size_t(i)] - out[1 + i];
    end[size_t(i)] = std::max<int64_t>(e, 0);
    extra[size_t(i)] = std::max<int64_t>(-e, 0);
  }
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(c.inputs.at(0), Layout::kChannelsFirst);
  std::vector<std::string> ins{x.name, b.constant(c.name() + "/kernel", hwio_to_oihw(k),
                                                  {k.dim(3), k.dim(2), k.dim(0), k.dim(1)})};
  std::vector<float> bias = bias_of(c);
  if (!bias.empty()) ins.push_back(b.constant(c.name() + "/bias", bias, {k.dim(2)}));
  pb::NodeProto& n = b.node("ConvTranspose", ins, c.name());
  set_attr(n, "kernel_shape", std::vector<int64_t>{k.dim(0), k.dim(1)});
  set_attr(n, "strides", strides);
  set_attr(n, "dilations", dil);
  set_attr(n, "pads", std::vector<int64_t>{begin[0], begin[1], end[0], end[1]});
  set_attr(n, "output_padding", extra);
  OnnxValue y{n.output(0), out, Layout::kChannelsFirst};
  return {apply_activation(b, y, cfg.value("activation", "linear"), c.name())};
}

}  // namespace

bool can_fold_batch_norm_into(const std::string& class_name) {
  return class_name == "Dense" || class_name == "Conv2D" || class_name == "DepthwiseConv2D" ||
         class_name == "SeparableConv2D";
}

void add_kernel_converters(ConverterTable& t) {
  t["Dense"] = dense;
  t["Conv2D"] = conv2d;
  t["DepthwiseConv2D"] = depthwise_conv2d;
  t["SeparableConv2D"] = separable_conv2d;
  t["Conv2DTranspose"] = conv2d_transpose;
}

}  // namespace lockstep::onnx
