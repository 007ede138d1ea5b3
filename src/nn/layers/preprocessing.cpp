// Keras image preprocessing layers: RandomFlip, RandomRotation, RandomZoom, RandomTranslation,
// RandomContrast, RandomBrightness, RandomCrop (active while training, like Dropout), and
// CenterCrop, Resizing (always). The image ops are in src/ops/image_ops.cpp.
#include "imaging/internal/augment.h"
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

using layers::Factor;

json factor_json(const Factor& f) {
  return f.single ? json(f.lower) : json::array({f.lower, f.upper});
}
// One number f -> [-f, f]; a pair as given.
std::vector<double> symmetric(const Factor& f) {
  return f.single ? std::vector<double>{-f.lower, f.lower} : std::vector<double>{f.lower, f.upper};
}
json seed_json(uint64_t seed) { return seed == 0 ? json(nullptr) : json(seed); }

// NHWC float32 input with known height, width and channels.
Value image_input(CallContext& ctx, Value x, const Layer& l) {
  const TensorType& t = ctx.graph.type(x);
  LS_CHECK(t.shape.rank() == 4, l.class_name(), " '", l.name(),
           "': expects images (batch, height, width, channels), got shape ", t.shape.str());
  for (int i = 1; i < 4; ++i)
    LS_CHECK(t.shape[i] > 0, l.class_name(), " '", l.name(),
             "': height, width and channels must be known, got ", t.shape.str());
  if (t.dtype != DType::f32) x = ctx.graph.add(op::cast, {x}, Attrs{{"dtype", "float32"}});
  return x;
}

// Keras smart_resize: the centred window of the target aspect ratio, resized to (h, w).
Value smart_resize(CallContext& ctx, Value x, int64_t h, int64_t w, const std::string& interp,
                   const std::string& name) {
  const Shape& s = ctx.graph.type(x).shape;
  auto box = augment::aspect_crop_box(s[1], s[2], h, w);
  if (box.height != s[1] || box.width != s[2])
    x = ctx.graph.add(op::slice, {x},
                      Attrs{{"begin", std::vector<int64_t>{0, box.top, box.left, 0}},
                            {"size", std::vector<int64_t>{-1, box.height, box.width, -1}}},
                      name);
  if (box.height == h && box.width == w) return x;
  return ctx.graph.add(op::image_resize, {x},
                       Attrs{{"height", h}, {"width", w}, {"interpolation", interp}}, name);
}

void check_transform_options(const layers::TransformLayerOptions& o, const std::string& who) {
  try {
    augment::parse_fill_mode(o.fill_mode);
    LS_CHECK(augment::parse_interpolation(o.interpolation) != augment::Interp::area,
             "interpolation must be \"bilinear\" or \"nearest\", got \"area\"");
  } catch (const Error& e) {
    LS_FAIL(who, ": ", e.what());
  }
}

void check_range(const std::vector<double>& r, double lo, double hi, const std::string& who,
                 const char* arg) {
  LS_CHECK(r[0] <= r[1], who, ": ", arg, " lower bound ", r[0], " is greater than the upper bound ",
           r[1]);
  LS_CHECK(r[0] >= lo && r[1] <= hi, who, ": ", arg, " must lie in [", lo, ", ", hi, "], got (",
           r[0], ", ", r[1], ")");
}

std::string who(const char* cls, const std::string& name) {
  return std::string(cls) + " '" + name + "'";
}

// ---- RandomFlip ----
class RandomFlipLayer : public Layer {
 public:
  bool computes_in_f32() const override { return true; }
  RandomFlipLayer(std::string mode, uint64_t seed, std::string name)
      : Layer(std::move(name)), mode_(std::move(mode)), seed_arg_(seed) {
    try {
      augment::parse_flip_mode(mode_);
    } catch (const Error& e) {
      LS_FAIL("RandomFlip '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "RandomFlip"; }
  json layer_config() const override {
    return {{"mode", mode_}, {"seed", seed_json(seed_arg_)}, {"data_format", "channels_last"}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value x = image_input(ctx, in.at(0), *this);
    if (!ctx.training) return {x};
    return {ctx.graph.add_multi(op::image_random_flip, {x},
                                Attrs{{"mode", mode_}, {"seed", int64_t(seed_arg_)}}, name())[0]};
  }

 private:
  std::string mode_;
  uint64_t seed_arg_;
};

// ---- RandomRotation / RandomZoom / RandomTranslation: one image_random_affine op ----
class RandomAffineLayer : public Layer {
 public:
  bool computes_in_f32() const override { return true; }
  enum class Kind { rotation, zoom, translation };
  RandomAffineLayer(Kind kind, Factor a, std::optional<Factor> b, layers::TransformLayerOptions o)
      : Layer(std::move(o.name)), kind_(kind), a_(a), b_(b), o_(std::move(o)) {
    const std::string w = who(cls(), name());
    check_transform_options(o_, w);
    if (kind_ == Kind::rotation) {
      check_range(symmetric(a_), -1e9, 1e9, w, "factor");
    } else if (kind_ == Kind::zoom) {
      check_range(symmetric(a_), -1.0, 1e9, w, "height_factor");
      if (b_) check_range(symmetric(*b_), -1.0, 1e9, w, "width_factor");
    } else {
      check_range(symmetric(a_), -1.0, 1.0, w, "height_factor");
      check_range(symmetric(*b_), -1.0, 1.0, w, "width_factor");
    }
  }
  const char* cls() const {
    return kind_ == Kind::rotation ? "RandomRotation"
           : kind_ == Kind::zoom   ? "RandomZoom"
                                   : "RandomTranslation";
  }
  std::string class_name() const override { return cls(); }
  json layer_config() const override {
    json c;
    if (kind_ == Kind::rotation) {
      c["factor"] = factor_json(a_);
    } else {
      c["height_factor"] = factor_json(a_);
      c["width_factor"] = b_ ? factor_json(*b_) : json(nullptr);
    }
    c["fill_mode"] = o_.fill_mode;
    c["fill_value"] = o_.fill_value;
    c["interpolation"] = o_.interpolation;
    c["seed"] = seed_json(o_.seed);
    c["data_format"] = "channels_last";
    return c;
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value x = image_input(ctx, in.at(0), *this);
    if (!ctx.training) return {x};
    Attrs a{{"fill_mode", o_.fill_mode},
            {"interpolation", o_.interpolation},
            {"fill_value", o_.fill_value},
            {"seed", int64_t(o_.seed)}};
    if (kind_ == Kind::rotation) {
      a.set("rotation", symmetric(a_));
    } else if (kind_ == Kind::zoom) {
      a.set("zoom_height", symmetric(a_));
      if (b_) a.set("zoom_width", symmetric(*b_));
    } else {
      a.set("translation_height", symmetric(a_));
      a.set("translation_width", symmetric(*b_));
    }
    return {ctx.graph.add_multi(op::image_random_affine, {x}, a, name())[0]};
  }

 private:
  Kind kind_;
  Factor a_;
  std::optional<Factor> b_;
  layers::TransformLayerOptions o_;
};

// ---- RandomContrast / RandomBrightness ----
class RandomColorLayer : public Layer {
 public:
  bool computes_in_f32() const override { return true; }
  RandomColorLayer(bool contrast, Factor f, layers::ValueRangeOptions o)
      : Layer(std::move(o.name)), contrast_(contrast), f_(f), o_(std::move(o)) {
    const std::string w = who(contrast ? "RandomContrast" : "RandomBrightness", name());
    LS_CHECK(o_.value_range.size() == 2 && o_.value_range[0] < o_.value_range[1], w,
             ": value_range must be [low, high] with low < high");
    if (contrast_) {
      LS_CHECK(f_.lower >= 0 && f_.upper >= 0 && f_.lower <= 1, w,
               ": factor must be non-negative with lower bound <= 1 (the contrast factor is drawn "
               "from [1 - lower, 1 + upper]), got (",
               f_.lower, ", ", f_.upper, ")");
    } else {
      check_range(symmetric(f_), -1.0, 1.0, w, "factor");
    }
  }
  std::string class_name() const override {
    return contrast_ ? "RandomContrast" : "RandomBrightness";
  }
  json layer_config() const override {
    // RandomContrast: always the pair, which Keras 3 reads as this range (it reads one number f
    // as (0, f): a factor in [1, 1 + f], not Lockstep's [1 - f, 1 + f]).
    json f = contrast_ ? json::array({f_.lower, f_.upper}) : factor_json(f_);
    json c = {{"factor", f}, {"value_range", o_.value_range}, {"seed", seed_json(o_.seed)}};
    if (contrast_) c["data_format"] = "channels_last";  // Keras 3.15's RandomContrast writes it
    return c;
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value x = image_input(ctx, in.at(0), *this);
    if (!ctx.training) return {x};
    std::vector<double> r = contrast_ ? std::vector<double>{f_.lower, f_.upper} : symmetric(f_);
    Attrs a{{"lower", r[0]},
            {"upper", r[1]},
            {"value_range", o_.value_range},
            {"seed", int64_t(o_.seed)}};
    const OpId op_id = contrast_ ? op::image_random_contrast : op::image_random_brightness;
    return {ctx.graph.add_multi(op_id, {x}, a, name())[0]};
  }

 private:
  bool contrast_;
  Factor f_;
  layers::ValueRangeOptions o_;
};

// ---- RandomCrop / CenterCrop / Resizing ----
class CropLayer : public Layer {
 public:
  bool computes_in_f32() const override { return true; }
  CropLayer(bool random, int64_t h, int64_t w, uint64_t seed, std::string name)
      : Layer(std::move(name)), random_(random), h_(h), w_(w), seed_arg_(seed) {
    LS_CHECK(h > 0 && w > 0, class_name(), " '", this->name(),
             "': height and width must be positive, got ", h, "x", w);
  }
  std::string class_name() const override { return random_ ? "RandomCrop" : "CenterCrop"; }
  json layer_config() const override {
    json c{{"height", h_}, {"width", w_}, {"data_format", "channels_last"}};
    if (random_) c["seed"] = seed_json(seed_arg_);
    return c;
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value x = image_input(ctx, in.at(0), *this);
    const Shape& s = ctx.graph.type(x).shape;
    if (s[1] == h_ && s[2] == w_) return {x};
    const bool fits = s[1] >= h_ && s[2] >= w_;
    if (random_ && ctx.training && fits)
      return {ctx.graph.add_multi(
          op::image_random_crop, {x},
          Attrs{{"height", h_}, {"width", w_}, {"seed", int64_t(seed_arg_)}}, name())[0]};
    if (!random_ && fits)
      return {ctx.graph.add(
          op::slice, {x},
          Attrs{{"begin", std::vector<int64_t>{0, (s[1] - h_) / 2, (s[2] - w_) / 2, 0}},
                {"size", std::vector<int64_t>{-1, h_, w_, -1}}},
          name())};
    return {smart_resize(ctx, x, h_, w_, "bilinear", name())};
  }

 private:
  bool random_;
  int64_t h_, w_;
  uint64_t seed_arg_;
};

class ResizingLayer : public Layer {
 public:
  bool computes_in_f32() const override { return true; }
  ResizingLayer(int64_t h, int64_t w, layers::ResizingOptions o)
      : Layer(std::move(o.name)), h_(h), w_(w), o_(std::move(o)) {
    LS_CHECK(h > 0 && w > 0, "Resizing '", name(), "': height and width must be positive, got ", h,
             "x", w);
    try {
      augment::parse_interpolation(o_.interpolation);
    } catch (const Error& e) {
      LS_FAIL("Resizing '", name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "Resizing"; }
  json layer_config() const override {
    return {{"height", h_},
            {"width", w_},
            {"interpolation", o_.interpolation},
            {"crop_to_aspect_ratio", o_.crop_to_aspect_ratio},
            {"pad_to_aspect_ratio", false},
            {"fill_mode", "constant"},
            {"fill_value", 0.0},
            {"data_format", "channels_last"}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value x = image_input(ctx, in.at(0), *this);
    const Shape& s = ctx.graph.type(x).shape;
    if (s[1] == h_ && s[2] == w_) return {x};
    if (o_.crop_to_aspect_ratio) return {smart_resize(ctx, x, h_, w_, o_.interpolation, name())};
    return {ctx.graph.add(op::image_resize, {x},
                          Attrs{{"height", h_}, {"width", w_}, {"interpolation", o_.interpolation}},
                          name())};
  }

 private:
  int64_t h_, w_;
  layers::ResizingOptions o_;
};

}  // namespace

namespace layers {

using layer_util::default_name;

LayerHandle RandomFlip(std::string mode, uint64_t seed, std::string name) {
  return LayerPtr(
      std::make_shared<RandomFlipLayer>(std::move(mode), seed, default_name(name, "random_flip")));
}

LayerHandle RandomRotation(Factor factor, TransformLayerOptions o) {
  o.name = default_name(o.name, "random_rotation");
  return LayerPtr(std::make_shared<RandomAffineLayer>(RandomAffineLayer::Kind::rotation, factor,
                                                      std::nullopt, std::move(o)));
}

LayerHandle RandomZoom(Factor height_factor, std::optional<Factor> width_factor,
                       TransformLayerOptions o) {
  o.name = default_name(o.name, "random_zoom");
  return LayerPtr(std::make_shared<RandomAffineLayer>(RandomAffineLayer::Kind::zoom, height_factor,
                                                      width_factor, std::move(o)));
}

LayerHandle RandomTranslation(Factor height_factor, Factor width_factor, TransformLayerOptions o) {
  o.name = default_name(o.name, "random_translation");
  return LayerPtr(std::make_shared<RandomAffineLayer>(RandomAffineLayer::Kind::translation,
                                                      height_factor, width_factor, std::move(o)));
}

LayerHandle RandomContrast(Factor factor, ValueRangeOptions o) {
  o.name = default_name(o.name, "random_contrast");
  return LayerPtr(std::make_shared<RandomColorLayer>(true, factor, std::move(o)));
}

LayerHandle RandomBrightness(Factor factor, ValueRangeOptions o) {
  o.name = default_name(o.name, "random_brightness");
  return LayerPtr(std::make_shared<RandomColorLayer>(false, factor, std::move(o)));
}

LayerHandle RandomCrop(int64_t height, int64_t width, uint64_t seed, std::string name) {
  return LayerPtr(
      std::make_shared<CropLayer>(true, height, width, seed, default_name(name, "random_crop")));
}

LayerHandle CenterCrop(int64_t height, int64_t width, std::string name) {
  return LayerPtr(
      std::make_shared<CropLayer>(false, height, width, 0, default_name(name, "center_crop")));
}

LayerHandle Resizing(int64_t height, int64_t width, ResizingOptions o) {
  o.name = default_name(o.name, "resizing");
  return LayerPtr(std::make_shared<ResizingLayer>(height, width, std::move(o)));
}

}  // namespace layers
}  // namespace lockstep
