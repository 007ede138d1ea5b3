// Reshaping layers: Flatten, Reshape (batch dimension kept symbolic as -1), ZeroPadding2D and
// UpSampling2D.
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

class FlattenLayer : public Layer {
 public:
  using Layer::Layer;
  std::string class_name() const override { return "Flatten"; }
  json layer_config() const override { return {{"data_format", "channels_last"}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    const Shape s = ctx.graph.type(in.at(0)).shape;
    LS_CHECK(s.rank() >= 1, "expected an input with a batch dimension, got ", s.str());
    int64_t prod = 1;
    for (int i = 1; i < s.rank(); ++i) {
      LS_CHECK(s[i] > 0, "all non-batch dimensions must be known, got ", s.str());
      prod *= s[i];
    }
    return {ctx.graph.add(op::reshape, {in[0]}, Attrs{{"shape", std::vector<int64_t>{-1, prod}}},
                          name())};
  }
};

class ReshapeLayer : public Layer {
 public:
  ReshapeLayer(std::vector<int64_t> target, std::string name)
      : Layer(std::move(name)), target_(std::move(target)) {
    int unknown = 0;
    for (int64_t d : target_) {
      LS_CHECK(d > 0 || d == -1, "Reshape '", this->name(),
               "': target_shape dimensions must be positive or -1, got ", Shape(target_).str());
      unknown += d == -1;
    }
    LS_CHECK(unknown <= 1, "Reshape '", this->name(), "': at most one -1 in target_shape, got ",
             Shape(target_).str());
  }
  std::string class_name() const override { return "Reshape"; }
  json layer_config() const override { return {{"target_shape", target_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    const Shape s = ctx.graph.type(in.at(0)).shape;
    int64_t numel = 1;
    for (int i = 1; i < s.rank(); ++i) {
      LS_CHECK(s[i] > 0, "all non-batch input dimensions must be known, got ", s.str());
      numel *= s[i];
    }
    int64_t known = 1;
    for (int64_t d : target_) known *= d > 0 ? d : 1;
    std::vector<int64_t> out{-1};
    for (int64_t d : target_) {
      if (d == -1) {
        LS_CHECK(numel % known == 0, "total size of the new array must be unchanged; input ",
                 s.str(), " cannot be reshaped to target_shape ", Shape(target_).str());
        out.push_back(numel / known);
      } else {
        out.push_back(d);
      }
    }
    int64_t total = 1;
    for (size_t i = 1; i < out.size(); ++i) total *= out[i];
    LS_CHECK(total == numel, "total size of the new array must be unchanged; input ", s.str(),
             " has ", numel, " elements per example, target_shape ", Shape(target_).str(), " has ",
             total);
    return {ctx.graph.add(op::reshape, {in[0]}, Attrs{{"shape", out}}, name())};
  }

 private:
  std::vector<int64_t> target_;
};

// keras.layers.ZeroPadding2D: the pad op on H and W of NHWC.
class ZeroPadding2DLayer : public Layer {
 public:
  ZeroPadding2DLayer(std::vector<int64_t> padding, std::string name) : Layer(std::move(name)) {
    const size_t n = padding.size();
    LS_CHECK(n == 1 || n == 2 || n == 4, "ZeroPadding2D '", this->name(),
             "': padding takes 1 value, 2 (height, width) or 4 (top, bottom, left, right), got ",
             Shape(padding).str());
    if (n == 1) pad_ = {padding[0], padding[0], padding[0], padding[0]};
    if (n == 2) pad_ = {padding[0], padding[0], padding[1], padding[1]};
    if (n == 4) pad_ = padding;
    for (int64_t p : pad_)
      LS_CHECK(p >= 0, "ZeroPadding2D '", this->name(), "': padding must be >= 0, got ",
               Shape(padding).str());
  }
  std::string class_name() const override { return "ZeroPadding2D"; }
  json layer_config() const override {
    return {{"padding", {{pad_[0], pad_[1]}, {pad_[2], pad_[3]}}},
            {"data_format", "channels_last"}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    const Shape s = ctx.graph.type(in.at(0)).shape;
    LS_CHECK(s.rank() == 4, "ZeroPadding2D '", name(), "': expects NHWC input of rank 4, got ",
             s.str());
    return {ctx.graph.add(op::pad, {in[0]},
                          Attrs{{"before", std::vector<int64_t>{0, pad_[0], pad_[2], 0}},
                                {"after", std::vector<int64_t>{0, pad_[1], pad_[3], 0}}},
                          name())};
  }

 private:
  std::vector<int64_t> pad_;  // top, bottom, left, right
};

// keras.layers.UpSampling2D: the upsample2d op (nearest or bilinear) on H and W of NHWC.
class UpSampling2DLayer : public Layer {
 public:
  UpSampling2DLayer(std::vector<int64_t> size, std::string interpolation, std::string name)
      : Layer(std::move(name)), interpolation_(std::move(interpolation)) {
    try {
      size_ = layer_util::pair(size, "size");
      for (int64_t v : size_) LS_CHECK(v >= 1, "size must be >= 1, got ", Shape(size).str());
      LS_CHECK(interpolation_ == "nearest" || interpolation_ == "bilinear",
               "interpolation must be \"nearest\" or \"bilinear\" in Lockstep, got \"",
               interpolation_, "\"");
    } catch (const Error& e) {
      LS_FAIL("UpSampling2D '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "UpSampling2D"; }
  json layer_config() const override {
    return {{"size", size_}, {"data_format", "channels_last"}, {"interpolation", interpolation_}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    const Shape s = ctx.graph.type(in.at(0)).shape;
    LS_CHECK(s.rank() == 4, "UpSampling2D '", name(), "': expects NHWC input of rank 4, got ",
             s.str());
    return {ctx.graph.add(op::upsample2d, {in[0]},
                          Attrs{{"size", size_}, {"interpolation", interpolation_}}, name())};
  }

 private:
  std::vector<int64_t> size_;
  std::string interpolation_;
};

}  // namespace

namespace layers {

LayerHandle UpSampling2D(std::vector<int64_t> size, std::string interpolation, std::string name) {
  return LayerPtr(std::make_shared<UpSampling2DLayer>(
      std::move(size), std::move(interpolation), layer_util::default_name(name, "up_sampling2d")));
}

LayerHandle ZeroPadding2D(std::vector<int64_t> padding, std::string name) {
  return LayerPtr(std::make_shared<ZeroPadding2DLayer>(
      std::move(padding), layer_util::default_name(name, "zero_padding2d")));
}

LayerHandle Flatten(std::string name) {
  return LayerPtr(std::make_shared<FlattenLayer>(layer_util::default_name(name, "flatten")));
}

LayerHandle Reshape(std::vector<int64_t> target_shape, std::string name) {
  return LayerPtr(std::make_shared<ReshapeLayer>(std::move(target_shape),
                                                 layer_util::default_name(name, "reshape")));
}

}  // namespace layers
}  // namespace lockstep
