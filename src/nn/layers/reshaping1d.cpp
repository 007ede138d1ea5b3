// The 1D reshaping layers (UpSampling1D, ZeroPadding1D, Cropping1D), SpatialDropout1D,
// RepeatVector, Permute (the transpose op) and TimeDistributed (its layer on [N * T, ...]).
#include <algorithm>

#include "lockstep/nn/layers_1d.h"
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

using I = std::vector<int64_t>;

Shape rank3(const Layer& l, const Shape& s) {
  LS_CHECK(s.rank() == 3, l.class_name(), " '", l.name(),
           "': expected input of rank 3 (batch, steps, channels), got ", s.str());
  return s;
}

// {p} -> {p, p}; {a, b} as it is; both >= 0.
I two_ends(const I& v, const char* cls, const std::string& name, const char* what) {
  LS_CHECK(v.size() == 1 || v.size() == 2, cls, " '", name, "': ", what,
           " takes 1 value or 2 (start, end), got ", Shape(v).str());
  I out = v.size() == 1 ? I{v[0], v[0]} : v;
  LS_CHECK(out[0] >= 0 && out[1] >= 0, cls, " '", name, "': ", what, " must be >= 0, got ",
           Shape(v).str());
  return out;
}

class UpSampling1DLayer : public Layer {
 public:
  UpSampling1DLayer(int64_t size, std::string name) : Layer(std::move(name)), size_(size) {
    LS_CHECK(size_ >= 1, "UpSampling1D '", this->name(), "': size must be >= 1, got ", size_);
  }
  std::string class_name() const override { return "UpSampling1D"; }
  json layer_config() const override { return {{"size", size_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = rank3(*this, g.type(in.at(0)).shape);
    // [N, W, 1, C] enlarged sh = size times along W (nearest repeats each step).
    Value x = g.add(op::reshape, {in[0]}, Attrs{{"shape", I{-1, s[1], 1, s[2]}}}, name());
    Value y =
        g.add(op::upsample2d, {x},
              Attrs{{"size", I{size_, 1}}, {"interpolation", std::string("nearest")}}, name());
    return {g.add(op::reshape, {y}, Attrs{{"shape", I{-1, s[1] * size_, s[2]}}}, name())};
  }

 private:
  int64_t size_;
};

// ZeroPadding1D (pad) and Cropping1D (slice) on the steps axis.
class Ends1DLayer : public Layer {
 public:
  Ends1DLayer(bool crop, I amount, std::string name)
      : Layer(std::move(name)),
        crop_(crop),
        ends_(two_ends(amount, crop ? "Cropping1D" : "ZeroPadding1D", this->name(),
                       crop ? "cropping" : "padding")) {}
  std::string class_name() const override { return crop_ ? "Cropping1D" : "ZeroPadding1D"; }
  json layer_config() const override {
    if (crop_) return {{"cropping", ends_}};
    return {{"padding", ends_}, {"data_format", "channels_last"}};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = rank3(*this, g.type(in.at(0)).shape);
    if (!crop_)
      return {g.add(op::pad, {in[0]},
                    Attrs{{"before", I{0, ends_[0], 0}}, {"after", I{0, ends_[1], 0}}}, name())};
    LS_CHECK(s[1] > ends_[0] + ends_[1], "Cropping1D '", name(), "': cropping ", Shape(ends_).str(),
             " must leave at least one of the input's ", s[1], " steps");
    return {
        g.add(op::slice, {in[0]},
              Attrs{{"begin", I{0, ends_[0], 0}}, {"size", I{-1, s[1] - ends_[0] - ends_[1], -1}}},
              name())};
  }

 private:
  bool crop_;
  I ends_;
};

// x * dropout(ones [N, 1, C]): one draw per example and channel, shared along the steps.
class SpatialDropout1DLayer : public Layer {
 public:
  SpatialDropout1DLayer(double rate, uint64_t seed, std::string name)
      : Layer(std::move(name)), rate_(rate), seed_(seed) {
    LS_CHECK(rate >= 0.0 && rate < 1.0, "SpatialDropout1D '", this->name(),
             "': rate must be in [0, 1), got ", rate);
  }
  std::string class_name() const override { return "SpatialDropout1D"; }
  // As Keras writes it: no trainable (null tells Layer::config() to leave it out).
  json layer_config() const override {
    return {{"rate", rate_},
            {"seed", seed_ == 0 ? json(nullptr) : json(seed_)},
            {"trainable", nullptr}};
  }
  bool supports_masking() const override { return true; }
  void build(const std::vector<Shape>& in) override { rank3(*this, in.at(0)); }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    rank3(*this, g.type(in.at(0)).shape);
    if (!ctx.training || rate_ == 0.0) return {in[0]};
    Value cell = g.add(op::slice, {in[0]}, Attrs{{"begin", I{0, 0, 0}}, {"size", I{-1, 1, -1}}});
    if (g.type(cell).dtype != DType::f32)
      cell = g.add(op::cast, {cell}, Attrs{{"dtype", "float32"}});
    Value ones = g.add(op::stop_gradient, {g.add(op::ones_like, {cell})});
    Value mask = g.add_multi(op::dropout, {ones}, Attrs{{"rate", rate_}, {"seed", int64_t(seed_)}},
                             name())[0];
    const DType dt = g.type(in[0]).dtype;
    if (dt != DType::f32)
      mask = g.add(op::cast, {mask}, Attrs{{"dtype", std::string(dtype_name(dt))}});
    return {g.add(op::mul, {in[0], mask}, {}, name())};
  }

 private:
  double rate_;
  uint64_t seed_;
};

class RepeatVectorLayer : public Layer {
 public:
  RepeatVectorLayer(int64_t n, std::string name) : Layer(std::move(name)), n_(n) {
    LS_CHECK(n_ >= 1, "RepeatVector '", this->name(), "': n must be >= 1, got ", n_);
  }
  std::string class_name() const override { return "RepeatVector"; }
  json layer_config() const override { return {{"n", n_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = g.type(in.at(0)).shape;
    LS_CHECK(s.rank() == 2, "RepeatVector '", name(), "': expected input of rank 2 (batch, ",
             "features), got ", s.str());
    Value x = g.add(op::reshape, {in[0]}, Attrs{{"shape", I{-1, 1, s[1]}}}, name());
    return {g.add(op::broadcast_to, {x}, Attrs{{"shape", I{s[0], n_, s[1]}}}, name())};
  }

 private:
  int64_t n_;
};

class PermuteLayer : public Layer {
 public:
  PermuteLayer(I dims, std::string name) : Layer(std::move(name)), dims_(std::move(dims)) {
    I sorted = dims_;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i)
      LS_CHECK(sorted[i] == int64_t(i) + 1, "Permute '", this->name(), "': dims ",
               Shape(dims_).str(), " must be a permutation of 1..", sorted.size(),
               " (the input's axes after the batch, counted from 1)");
  }
  std::string class_name() const override { return "Permute"; }
  json layer_config() const override { return {{"dims", dims_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    const Shape s = ctx.graph.type(in.at(0)).shape;
    LS_CHECK(s.rank() == int(dims_.size()) + 1, "Permute '", name(), "': dims ", Shape(dims_).str(),
             " permute ", dims_.size(), " axes, the input ", s.str(), " has ", s.rank() - 1,
             " after the batch");
    I perm{0};
    perm.insert(perm.end(), dims_.begin(), dims_.end());
    return {ctx.graph.add(op::transpose, {in[0]}, Attrs{{"perm", perm}}, name())};
  }

 private:
  I dims_;
};

class TimeDistributedLayer : public Layer {
 public:
  TimeDistributedLayer(LayerPtr inner, std::string name)
      : Layer(std::move(name)), inner_(std::move(inner)) {
    LS_CHECK(inner_ != nullptr, "TimeDistributed '", this->name(), "': needs a layer to wrap");
  }
  std::string class_name() const override { return "TimeDistributed"; }
  json layer_config() const override {
    return {{"layer",
             {{"module", "keras.layers"},
              {"class_name", inner_->class_name()},
              {"config", inner_->config()},
              {"registered_name", nullptr}}}};
  }
  const LayerPtr& inner() const { return inner_; }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 3, "TimeDistributed '", name(),
             "': expected input of rank 3 or more (batch, time, ...), got ", s.str());
    I inner_shape{-1};
    for (int i = 2; i < s.rank(); ++i) inner_shape.push_back(s[i]);
    inner_->ensure_built({Shape(inner_shape)});
    for (const VariablePtr& w : inner_->weights()) track_weight(w);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = g.type(in.at(0)).shape;
    LS_CHECK(s.rank() >= 3 && s[1] > 0, "TimeDistributed '", name(),
             "': expected input (batch, time, ...) with a known time, got ", s.str());
    I flat{-1};
    for (int i = 2; i < s.rank(); ++i) flat.push_back(s[i]);
    Value x = g.add(op::reshape, {in[0]}, Attrs{{"shape", flat}}, name());
    std::vector<Value> ys = inner_->invoke(ctx, {x});
    LS_CHECK(ys.size() == 1, "TimeDistributed '", name(), "': the wrapped layer '", inner_->name(),
             "' returns ", ys.size(), " outputs; TimeDistributed takes one");
    const Shape ys0 = g.type(ys[0]).shape;
    I out{-1, s[1]};
    for (int i = 1; i < ys0.rank(); ++i) out.push_back(ys0[i]);
    return {g.add(op::reshape, {ys[0]}, Attrs{{"shape", out}}, name())};
  }

 private:
  LayerPtr inner_;
};

}  // namespace

namespace layers {

LayerHandle UpSampling1D(int64_t size, std::string name) {
  return LayerPtr(
      std::make_shared<UpSampling1DLayer>(size, layer_util::default_name(name, "up_sampling1d")));
}

LayerHandle ZeroPadding1D(std::vector<int64_t> padding, std::string name) {
  return LayerPtr(std::make_shared<Ends1DLayer>(false, std::move(padding),
                                                layer_util::default_name(name, "zero_padding1d")));
}

LayerHandle Cropping1D(std::vector<int64_t> cropping, std::string name) {
  return LayerPtr(std::make_shared<Ends1DLayer>(true, std::move(cropping),
                                                layer_util::default_name(name, "cropping1d")));
}

LayerHandle SpatialDropout1D(double rate, uint64_t seed, std::string name) {
  return LayerPtr(std::make_shared<SpatialDropout1DLayer>(
      rate, seed, layer_util::default_name(name, "spatial_dropout1d")));
}

LayerHandle RepeatVector(int64_t n, std::string name) {
  return LayerPtr(
      std::make_shared<RepeatVectorLayer>(n, layer_util::default_name(name, "repeat_vector")));
}

LayerHandle Permute(std::vector<int64_t> dims, std::string name) {
  return LayerPtr(
      std::make_shared<PermuteLayer>(std::move(dims), layer_util::default_name(name, "permute")));
}

LayerHandle TimeDistributed(LayerHandle layer, std::string name) {
  return LayerPtr(std::make_shared<TimeDistributedLayer>(
      layer.ptr(), layer_util::default_name(name, "time_distributed")));
}

}  // namespace layers
}  // namespace lockstep
