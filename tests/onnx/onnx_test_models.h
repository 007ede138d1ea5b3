// Models the ONNX tests export (tests/onnx/*): the reference CNN, a ResNet-style block with
// BatchNormalization and a residual Add, a branchy functional model (Concatenate, Multiply,
// depthwise/separable/grouped convolutions, Normalization, LayerNormalization, Dense on rank 3)
// and a preprocessing stack (augmentation, CenterCrop, RandomCrop, Resizing, Rescaling), the
// GroupNormalization / PReLU / LeakyReLU / ELU / SpatialDropout2D model, and
// models holding nested models (a Sequential in a functional model, a functional block in a
// Sequential, one nested model called twice), with weights drawn from a fixed generator so
// exports are not of freshly initialised models.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../../examples/reference_cnn.h"
#include "lockstep/lockstep.h"

namespace lockstep::onnx_test {

inline Tensor fixed_values(const Shape& s, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::vector<float> v(size_t(s.numel()));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 12345;
  for (auto& f : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    f = lo + (hi - lo) * float((x >> 40) % 100001) / 100000.f;
  }
  return Tensor::from_vector(s, v);
}

// Kernels ~U(-a, a) with a = sqrt(3 / fan_in) (unit-variance outputs, the scale of a trained
// model's logits), biases ~U(-0.4, 0.4); BatchNormalization gamma in [0.5, 1.5], moving
// variance in [0.3, 2], moving mean and beta in [-0.5, 0.5] (so folding changes every number).
inline void randomize(Network& m, uint64_t seed) {
  for (auto& w : m.weights()) {
    const std::string& n = w->name;
    auto ends = [&](const char* s) {
      std::string e(s);
      return n.size() >= e.size() && n.compare(n.size() - e.size(), e.size(), e) == 0;
    };
    Tensor t = ends("variance")               ? fixed_values(w->value.shape(), seed++, 0.3f, 2.f)
               : ends("gamma")                ? fixed_values(w->value.shape(), seed++, 0.5f, 1.5f)
               : ends("mean") || ends("beta") ? fixed_values(w->value.shape(), seed++, -0.5f, 0.5f)
                                              : fixed_values(w->value.shape(), seed++, -0.4f, 0.4f);
    if (t.rank() >= 2) {  // a kernel: fan_in = all but the last (output) axis
      const float a = std::sqrt(3.f * float(t.dim(t.rank() - 1)) / float(t.numel()));
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] *= a / 0.4f;
    }
    w->value.copy_from(t);
  }
}

inline Model resnet_block() {
  using namespace layers;
  KTensor x = Input({16, 16, 3}, "image");
  KTensor stem = Conv2D(8, 3, {.padding = "same", .use_bias = false, .name = "stem"})(x);
  stem = BatchNormalization({.name = "stem_bn"})(stem);
  stem = ReLU("stem_relu")(stem);
  KTensor r = Conv2D(8, 3, {.padding = "same", .name = "res_a"})(stem);
  r = BatchNormalization({.name = "res_a_bn"})(r);
  r = Activation("relu", "res_a_relu")(r);
  r = Conv2D(8, 3, {.padding = "same", .name = "res_b"})(r);
  r = BatchNormalization({.name = "res_b_bn"})(r);
  KTensor sum = Add("residual")({stem, r});
  sum = BatchNormalization({.name = "post_add_bn"})(sum);  // after Add: not foldable
  sum = Activation("relu", "block_out")(sum);
  KTensor down = Conv2D(12, 3, {.strides = {2, 2}, .padding = "same", .name = "down"})(sum);
  down = BatchNormalization({.name = "down_bn"})(down);
  down = Activation("relu6", "down_relu6")(down);
  KTensor pooled = GlobalAveragePooling2D(false, "gap")(down);
  KTensor h = Dense(16, {.activation = "relu", .name = "fc"})(pooled);
  h = BatchNormalization({.name = "fc_bn"})(h);  // after a relu: kept as BatchNormalization
  KTensor y = Dense(10, {.activation = "softmax", .name = "probs"})(h);
  return Model({x}, {y}, "resnet_block");
}

inline Model branchy() {
  using namespace layers;
  KTensor x = Input({12, 12, 3}, "pixels");
  KTensor n = Normalization(
      {.mean = {0.1, -0.2, 0.3}, .variance = {0.5, 2.0, 1.5}, .name = "normalize"})(x);
  KTensor a = DepthwiseConv2D(
      {3, 3},
      {.padding = "same", .activation = "relu", .depth_multiplier = 2, .name = "depthwise"})(n);
  KTensor b =
      SeparableConv2D(6, {3, 3}, {.padding = "same", .activation = "tanh", .name = "separable"})(n);
  KTensor c = Conv2D(6, 1, {.groups = 3, .activation = "swish", .name = "grouped"})(n);
  KTensor cat = Concatenate(-1, "concat")({a, b, c});  // 18 channels
  KTensor avg =
      AveragePooling2D({3, 3}, {.strides = {2, 2}, .padding = "same", .name = "avg"})(cat);
  KTensor mx = MaxPooling2D({2, 2}, {.strides = {1, 1}, .padding = "same", .name = "max"})(avg);
  KTensor gate = Conv2D(18, 1, {.activation = "sigmoid", .name = "gate"})(avg);
  KTensor gated = Multiply("gated")({mx, gate});
  KTensor d = Conv2D(
      8, 3,
      {.strides = {2, 2}, .dilation_rate = {1, 1}, .activation = "leaky_relu", .name = "strided"})(
      gated);  // 6x6 -> 2x2 (valid)
  KTensor seq = Reshape({4, 8}, "to_sequence")(d);
  seq = Dense(6, {.activation = "gelu", .name = "per_position"})(seq);  // rank 3: MatMul
  seq = LayerNormalization({.name = "layer_norm"})(seq);
  KTensor flat = Flatten("flatten")(seq);
  KTensor g = GlobalMaxPooling2D(false, "gmp")(gated);
  KTensor both = Concatenate(-1, "heads")({flat, g});
  KTensor y = Dense(5, {.activation = "log_softmax", .name = "scores"})(both);
  return Model({x}, {y}, "branchy");
}

// A MobileNetV2 / EfficientNet block: ZeroPadding2D then a stride-2 "valid" depthwise
// convolution, ReLU(max_value=6), a clipped leaky ReLU, squeeze-and-excitation (Reshape +
// Multiply), Dropout with a noise_shape (removed) and a residual Add.
inline Model inverted_residual() {
  using namespace layers;
  KTensor x = Input({9, 10, 4}, "pixels");
  KTensor e = Conv2D(8, 1, {.use_bias = false, .name = "expand"})(x);
  e = ReLU({.max_value = 6.0, .name = "expand_relu6"})(
      BatchNormalization({.name = "expand_bn"})(e));
  e = ZeroPadding2D({0, 1, 1, 1}, "pad")(e);
  KTensor d = DepthwiseConv2D({3, 3}, {.strides = {2, 2}, .use_bias = false, .name = "dw"})(e);
  d = ReLU({.max_value = 1.5, .negative_slope = 0.1, .name = "clipped_leaky"})(d);
  KTensor se = GlobalAveragePooling2D(false, "se_squeeze")(d);
  se = Reshape({1, 1, 8}, "se_reshape")(se);
  se = Conv2D(8, 1, {.activation = "sigmoid", .name = "se_expand"})(se);
  d = Multiply("se_excite")({d, se});
  KTensor p = Conv2D(4, 1, {.use_bias = false, .name = "project"})(d);
  p = Dropout(0.2, {.noise_shape = {-1, 1, 1, 1}, .name = "drop"})(p);
  KTensor skip = ZeroPadding2D({0, 0, 1, 1}, "skip_pad")(x);
  skip = AveragePooling2D({3, 3}, {.strides = {2, 2}, .name = "skip_pool"})(skip);
  KTensor y = Add("add")({p, skip});
  y = ReLU({.negative_slope = 0.3, .name = "leaky"})(y);
  return Model({x}, {Dense(3, {.name = "out"})(Flatten("flatten")(y))}, "inverted_residual");
}

// GroupNormalization (after a convolution, so on NCHW, and on [N, C]), PReLU per channel and per
// position, SpatialDropout2D (removed), LeakyReLU, ELU and the "elu" activation.
inline Model extra_layers() {
  using namespace layers;
  KTensor x = Input({6, 7, 4}, "pixels");
  KTensor h = Conv2D(8, 3, {.padding = "same", .name = "conv_a"})(x);
  h = GroupNormalization({.groups = 4, .name = "gn_spatial"})(h);
  h = PReLU({.shared_axes = {1, 2}, .name = "prelu_channel"})(h);
  h = SpatialDropout2D(0.3, 0, "spatial_drop")(h);
  h = LeakyReLU(0.3, "leaky")(Conv2D(6, 3, {.name = "conv_b"})(h));
  h = PReLU({.name = "prelu_position"})(ELU(0.7, "elu")(h));
  KTensor g = GlobalAveragePooling2D(false, "gap")(h);
  g = GroupNormalization({.groups = 3, .epsilon = 1e-2, .center = false, .name = "gn_flat"})(g);
  return Model({x}, {Dense(3, {.activation = "elu", .name = "out"})(g)}, "extra_layers");
}

// A decoder: Conv2DTranspose (same with stride 2, valid with stride 3 > kernel and
// output_padding, dilated) and UpSampling2D (bilinear and nearest): ConvTranspose and Resize.
inline Model decoder() {
  using namespace layers;
  return Sequential(
      {Input({4, 5, 3}, "code"),
       Conv2DTranspose(
           4, 3, {.strides = {2, 2}, .padding = "same", .activation = "relu", .name = "up_same"}),
       UpSampling2D({2, 1}, "bilinear", "bilinear"),
       Conv2DTranspose(3, {2, 3},
                       {.strides = {3, 2}, .output_padding = {1, 1}, .name = "up_valid"}),
       Conv2DTranspose(
           2, 3,
           {.padding = "same", .dilation_rate = {2, 2}, .use_bias = false, .name = "dilated"}),
       UpSampling2D({1, 2}, "nearest", "nearest"), Flatten("flatten"), Dense(3, {.name = "out"})},
      "decoder");
}

inline Model preprocessing_stack() {
  using namespace layers;
  return Sequential({Input({20, 24, 3}, "photo"), RandomFlip("horizontal", 7), RandomRotation(0.1),
                     RandomContrast(0.2), CenterCrop(16, 18, "center"),
                     Resizing(12, 12, {.name = "resize_bilinear"}),
                     RandomCrop(10, 10, 3, "random_crop"),  // inference: resized to 10x10
                     Rescaling(1.0 / 255.0, -0.5, "rescale"),
                     Conv2D(4, 3, {.activation = "softplus", .name = "conv"}),
                     Resizing(6, 6, {.interpolation = "nearest", .name = "resize_nearest"}),
                     Resizing(5, 4, {.crop_to_aspect_ratio = true, .name = "resize_cropped"}),
                     Dropout(0.3), Flatten(),
                     Dense(3, {.activation = "exponential", .name = "out"})});
}

// Nested models (Network::as_layer), which export inlines. A Sequential feature extractor
// with a BatchNormalization (folded inside it) in a functional model.
inline Model sequential_in_functional() {
  using namespace layers;
  Model features = Sequential(
      {Input({12, 12, 3}), Conv2D(6, 3, {.padding = "same", .use_bias = false, .name = "conv"}),
       BatchNormalization({.name = "bn"}), ReLU("relu"), MaxPooling2D({2, 2}, {.name = "pool"})},
      "features");
  KTensor x = Input({12, 12, 3}, "image");
  KTensor h = GlobalAveragePooling2D(false, "gap")(features(x));
  return Model({x}, {Dense(4, {.name = "head"})(h)}, "sequential_in_functional");
}

// A functional residual block (itself holding a Sequential with a BatchNormalization: two
// levels deep) in a Sequential.
inline Model functional_in_sequential() {
  using namespace layers;
  Model mini = Sequential({Input({8, 8, 4}), Conv2D(4, 3, {.padding = "same", .name = "conv"}),
                           BatchNormalization({.name = "bn"})},
                          "mini");
  KTensor i = Input({8, 8, 4});
  KTensor sum = Add("add")({i, mini(i)});
  Model block(i, Activation("relu", "relu")(sum), "block");
  return Sequential({Input({8, 8, 4}, "x"), Conv2D(4, 1, {.name = "stem"}), block,
                     Flatten("flatten"), Dense(3, {.activation = "softmax", .name = "head"})},
                    "functional_in_sequential");
}

// One nested model called twice (shared weights), on the input and on a rescaled input.
inline Model shared_nested() {
  using namespace layers;
  Model tower = Sequential(
      {Input({6, 6, 2}), Conv2D(3, 3, {.padding = "same", .activation = "relu", .name = "conv"}),
       Flatten("flatten"), Dense(5, {.name = "dense"})},
      "tower");
  KTensor x = Input({6, 6, 2}, "x");
  KTensor scaled = Rescaling(0.5, 0.1, "rescale")(x);
  KTensor both = Concatenate(-1, "concat")({tower(x), tower(scaled)});
  return Model({x}, {Dense(2, {.name = "head"})(both)}, "shared_nested");
}

}  // namespace lockstep::onnx_test
