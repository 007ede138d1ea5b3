// Layers that act at inference only through their inference form: Dropout and the random
// augmentation layers are the identity; CenterCrop, RandomCrop and Resizing crop (Slice) and
// resize (Resize, tf.image.resize's half-pixel grid) as Lockstep's predict does; UpSampling2D is
// a Resize too.
#include "lockstep/imaging/resize.h"
#include "onnx/onnx_graph.h"

namespace lockstep::onnx {
namespace {

std::vector<OnnxValue> identity(ConvertCall& c) {
  c.b.report().removed.push_back(c.name());
  OnnxValue v = c.inputs.at(0);
  v.shape = c.output_shape();
  return {v};
}

// x[:, top:top+height, left:left+width, :] in the value's layout.
OnnxValue crop(ConvertCall& c, const OnnxValue& x, int64_t top, int64_t left, int64_t height,
               int64_t width) {
  GraphBuilder& b = c.b;
  const std::string base = c.name() + "/crop";
  std::string y = b.add("Slice",
                        {x.name, b.constant_i64(base + "_starts", {top, left}),
                         b.constant_i64(base + "_ends", {top + height, left + width}),
                         b.constant_i64(base + "_axes", {layout_axis(x, 1), layout_axis(x, 2)})},
                        c.name());
  Shape s = x.shape;
  s[1] = height;
  s[2] = width;
  return OnnxValue{y, s, x.layout};
}

// Resize to (height, width): NCHW, sizes = [N, C] of the input + [height, width].
OnnxValue resize(ConvertCall& c, const OnnxValue& in, int64_t height, int64_t width,
                 const std::string& interpolation) {
  if (interpolation != "bilinear" && interpolation != "nearest")
    unsupported(c, "interpolation \"" + interpolation + "\" (bilinear and nearest are exported)");
  GraphBuilder& b = c.b;
  OnnxValue x = b.to_layout(in, Layout::kChannelsFirst);
  std::string batch_channels =
      b.add("Slice",
            {b.add("Shape", {x.name}, c.name()), b.constant_i64(c.name() + "/zero", {0}),
             b.constant_i64(c.name() + "/two", {2})},
            c.name());
  pb::NodeProto& sizes = b.node(
      "Concat", {batch_channels, b.constant_i64(c.name() + "/size", {height, width})}, c.name());
  set_attr(sizes, "axis", int64_t(0));
  pb::NodeProto& r = b.node("Resize", {x.name, "", "", sizes.output(0)}, c.name());
  if (interpolation == "bilinear") {
    set_attr(r, "mode", std::string("linear"));
    set_attr(r, "coordinate_transformation_mode", std::string("half_pixel"));
  } else {  // tf.image.resize nearest: floor((x + 0.5) * in / out) = round_prefer_ceil of the
            // half-pixel coordinate (x + 0.5) * in / out - 0.5
    set_attr(r, "mode", std::string("nearest"));
    set_attr(r, "coordinate_transformation_mode", std::string("half_pixel"));
    set_attr(r, "nearest_mode", std::string("round_prefer_ceil"));
  }
  Shape s = x.shape;
  s[1] = height;
  s[2] = width;
  return OnnxValue{r.output(0), s, Layout::kChannelsFirst};
}

// Keras smart_resize: the centred window of the target's aspect ratio, then resize.
OnnxValue smart_resize(ConvertCall& c, const OnnxValue& x, int64_t height, int64_t width,
                       const std::string& interpolation) {
  const Shape& s = x.shape;
  auto box = imaging::aspect_crop_box(int(s[1]), int(s[2]), int(height), int(width));
  OnnxValue y = x;
  if (box.height != s[1] || box.width != s[2]) y = crop(c, x, box.y, box.x, box.height, box.width);
  if (box.height == height && box.width == width) return y;
  return resize(c, y, height, width, interpolation);
}

std::vector<OnnxValue> crop_layer(ConvertCall& c) {
  const OnnxValue& x = c.inputs.at(0);
  const int64_t h = c.config.at("height").get<int64_t>(), w = c.config.at("width").get<int64_t>();
  const Shape& s = x.shape;
  if (s[1] == h && s[2] == w) return identity(c);
  const bool fits = s[1] >= h && s[2] >= w;
  // Inference: CenterCrop slices when the image is large enough; RandomCrop (and CenterCrop
  // on a smaller image) crop to the aspect ratio and resize, as Keras.
  if (c.layer().class_name() == "CenterCrop" && fits)
    return {crop(c, x, (s[1] - h) / 2, (s[2] - w) / 2, h, w)};
  return {smart_resize(c, x, h, w, "bilinear")};
}

std::vector<OnnxValue> resizing(ConvertCall& c) {
  const OnnxValue& x = c.inputs.at(0);
  const int64_t h = c.config.at("height").get<int64_t>(), w = c.config.at("width").get<int64_t>();
  if (c.config.value("pad_to_aspect_ratio", false)) unsupported(c, "pad_to_aspect_ratio=True");
  if (x.shape[1] == h && x.shape[2] == w) return identity(c);
  const std::string interpolation = c.config.value("interpolation", "bilinear");
  if (c.config.value("crop_to_aspect_ratio", false))
    return {smart_resize(c, x, h, w, interpolation)};
  return {resize(c, x, h, w, interpolation)};
}

// UpSampling2D: Resize to the output's size. Whole factors make the half-pixel nearest
// coordinate round to j / s (each pixel repeated) and the half-pixel linear one Keras's
// bilinear (ONNX Runtime clamps at the edges, as jax.image.resize's weights do).
std::vector<OnnxValue> up_sampling2d(ConvertCall& c) {
  const Shape out = c.output_shape();
  return {resize(c, c.inputs.at(0), out[1], out[2], c.config.value("interpolation", "nearest"))};
}

}  // namespace

void add_preprocessing_converters(ConverterTable& t) {
  for (const char* cls : {"Dropout", "SpatialDropout2D", "RandomFlip", "RandomRotation",
                          "RandomZoom", "RandomTranslation", "RandomContrast", "RandomBrightness"})
    t[cls] = identity;
  t["CenterCrop"] = crop_layer;
  t["RandomCrop"] = crop_layer;
  t["Resizing"] = resizing;
  t["UpSampling2D"] = up_sampling2d;
}

}  // namespace lockstep::onnx
