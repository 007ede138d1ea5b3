// KerasHub's fixed position encodings: SinePositionEncoding and RotaryEmbedding
// (keras_hub/src/layers/modeling/sine_position_encoding.py, rotary_embedding.py). Their tables
// are computed on the host in float32, as KerasHub computes them, for the input's static
// sequence length, and read by the graph as fixed (non-weight) tables.
#include <cmath>

#include "lockstep/nn/keras_hub.h"
#include "nn/layers/keras_hub_util.h"

namespace lockstep {
namespace keras_hub_detail {
namespace {

class SinePositionEncodingLayer : public HubLayer {
 public:
  SinePositionEncodingLayer(double max_wavelength, std::string name)
      : HubLayer(std::move(name), "sine_position_encoding"), max_wavelength_(max_wavelength) {
    LS_CHECK(max_wavelength_ > 0, "SinePositionEncoding '", this->name(),
             "': max_wavelength must be positive, got ", max_wavelength_);
  }
  std::string class_name() const override { return "SinePositionEncoding"; }
  json layer_config() const override { return {{"max_wavelength", max_wavelength_}}; }
  bool supports_masking() const override { return true; }  // Keras ignores the mask
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>&,
                                  const std::vector<Value>&, int n) override {
    return std::vector<Value>(size_t(n));
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 2 && s[-1] > 0 && s[-2] > 0, "SinePositionEncoding '", name(),
             "': expected inputs [batch, ..., sequence, features], got ", s.str());
    const int64_t steps = s[-2], features = s[-1];
    Tensor t = Tensor::empty(Shape{steps, features});
    float* p = t.data<float>();
    const float min_freq = float(1.0 / max_wavelength_);
    for (int64_t j = 0; j < features; ++j) {
      const float timescale = std::pow(min_freq, float(2 * (j / 2)) / float(features));
      for (int64_t i = 0; i < steps; ++i) {
        const float angle = float(i + start_index_) * timescale;
        p[i * features + j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
      }
    }
    table_ = fixed_table(name() + "/encoding", std::move(t));
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    LS_CHECK(ctx.graph.type(in.at(0)).shape[-2] == table_->value.dim(0), "SinePositionEncoding '",
             name(), "': built for ", table_->value.dim(0), " steps, called on ",
             ctx.graph.type(in.at(0)).shape.str());
    return {broadcast_like(ctx.graph, in.at(0), ctx.read(table_), name())};
  }

 protected:
  bool takes_start_index() const override { return true; }

 private:
  double max_wavelength_;
  VariablePtr table_;
};

class RotaryEmbeddingLayer : public HubLayer {
 public:
  explicit RotaryEmbeddingLayer(keras_hub::RotaryEmbeddingOptions o)
      : HubLayer(o.name, "rotary_embedding"), o_(std::move(o)) {
    const std::string& t = o_.rope_type;
    LS_CHECK(t == "linear" || t == "dynamic" || t == "default", "RotaryEmbedding '", name(),
             "': rope_type '", t, "' is not one Lockstep supports (linear, dynamic, default; ",
             "KerasHub's yarn is not supported)");
    LS_CHECK(o_.max_wavelength > 0 && o_.scaling_factor > 0, "RotaryEmbedding '", name(),
             "': max_wavelength and scaling_factor must be positive");
  }
  std::string class_name() const override { return "RotaryEmbedding"; }
  json layer_config() const override {
    return {{"max_wavelength", o_.max_wavelength},
            {"scaling_factor", o_.scaling_factor},
            {"rope_type", o_.rope_type},
            {"beta_fast", 32.0},
            {"beta_slow", 1.0},
            {"original_max_position_embeddings", 4096},
            {"truncate", true},
            {"sequence_axis", o_.sequence_axis},
            {"feature_axis", o_.feature_axis},
            {"denominator_dim", o_.denominator_dim ? json(*o_.denominator_dim) : json(nullptr)}};
  }
  bool supports_masking() const override { return true; }  // Keras ignores the mask
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>&,
                                  const std::vector<Value>&, int n) override {
    return std::vector<Value>(size_t(n));
  }
  void build(const std::vector<Shape>& in) override;
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override;

 protected:
  bool takes_start_index() const override { return true; }

 private:
  std::vector<float> inverse_frequencies(int64_t dim) const;
  keras_hub::RotaryEmbeddingOptions o_;
  int64_t seq_axis_ = 1, feat_axis_ = 2;
  VariablePtr cos_, sin_;
};

std::vector<float> RotaryEmbeddingLayer::inverse_frequencies(int64_t dim) const {
  const float denom = float(o_.denominator_dim.value_or(dim));
  std::vector<float> inv;
  for (int64_t i = 0; i < dim; i += 2) {
    float f = std::pow(float(o_.max_wavelength), -(float(i) / denom));
    if (o_.rope_type == "linear") f /= float(o_.scaling_factor);
    if (o_.rope_type == "dynamic")
      f /= std::pow(float(o_.scaling_factor), float(dim) / float(std::max<int64_t>(1, dim - 2)));
    inv.push_back(f);
  }
  return inv;
}

void RotaryEmbeddingLayer::build(const std::vector<Shape>& in) {
  const Shape& s = in.at(0);
  const int64_t rank = s.rank();
  seq_axis_ = o_.sequence_axis < 0 ? o_.sequence_axis + rank : o_.sequence_axis;
  feat_axis_ = o_.feature_axis < 0 ? o_.feature_axis + rank : o_.feature_axis;
  LS_CHECK(rank >= 3 && seq_axis_ > 0 && seq_axis_ < rank && feat_axis_ > 0 && feat_axis_ < rank &&
               seq_axis_ != feat_axis_,
           "RotaryEmbedding '", name(), "': sequence_axis ", o_.sequence_axis, " and feature_axis ",
           o_.feature_axis, " must be two different non-batch axes of the input ", s.str());
  const int64_t steps = s[seq_axis_], dim = s[feat_axis_];
  LS_CHECK(dim % 2 == 0, "RotaryEmbedding '", name(), "': the rotary dimension must be even, got ",
           dim, " (input ", s.str(), ")");
  const std::vector<float> inv = inverse_frequencies(dim);
  std::vector<int64_t> table_shape(size_t(rank), 1);
  table_shape[size_t(seq_axis_)] = steps;
  table_shape[size_t(feat_axis_)] = dim;
  Tensor c = Tensor::empty(Shape(table_shape)), sn = Tensor::empty(Shape(table_shape));
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t j = 0; j < dim; ++j) {
      const float angle = float(t + start_index_) * inv[size_t(j % (dim / 2))];
      const int64_t at = seq_axis_ < feat_axis_ ? t * dim + j : j * steps + t;
      c.data<float>()[at] = std::cos(angle);
      sn.data<float>()[at] = std::sin(angle);
    }
  cos_ = fixed_table(name() + "/cos", std::move(c));
  sin_ = fixed_table(name() + "/sin", std::move(sn));
}

std::vector<Value> RotaryEmbeddingLayer::call(CallContext& ctx, const std::vector<Value>& in) {
  Graph& g = ctx.graph;
  Value x = in.at(0);
  const Shape s = g.type(x).shape;
  const int64_t half = s[feat_axis_] / 2;
  std::vector<int64_t> begin(size_t(s.rank()), 0), size(size_t(s.rank()), -1);
  size[size_t(feat_axis_)] = half;
  Value x1 = g.add(op::slice, {x}, Attrs{{"begin", begin}, {"size", size}}, name());
  begin[size_t(feat_axis_)] = half;
  Value x2 = g.add(op::slice, {x}, Attrs{{"begin", begin}, {"size", size}}, name());
  Value rotated = g.add(op::concat, {g.add(op::neg, {x2}, {}, name()), x1},
                        Attrs{{"axis", feat_axis_}}, name());
  const DType dt = g.type(x).dtype;
  Value c = cast_to(g, ctx.read(cos_), dt, name()), sn = cast_to(g, ctx.read(sin_), dt, name());
  return {g.add(op::add,
                {g.add(op::mul, {x, c}, {}, name()), g.add(op::mul, {rotated, sn}, {}, name())}, {},
                name())};
}

}  // namespace
}  // namespace keras_hub_detail

namespace keras_hub {
using namespace keras_hub_detail;  // NOLINT: the layer classes above

LayerHandle SinePositionEncoding(double max_wavelength, std::string name) {
  return LayerPtr(std::make_shared<SinePositionEncodingLayer>(
      max_wavelength, layer_util::default_name(name, "sine_position_encoding")));
}

LayerHandle RotaryEmbedding(RotaryEmbeddingOptions o) {
  o.name = layer_util::default_name(o.name, "rotary_embedding");
  return LayerPtr(std::make_shared<RotaryEmbeddingLayer>(o));
}

}  // namespace keras_hub

namespace keras_hub_detail {

LayerPtr sine_position_encoding_from_config(const json& c) {
  KerasConfigReader r("SinePositionEncoding", c);
  const double max_wavelength = r.get<double>("max_wavelength", 10000.0);
  r.finish();
  return std::make_shared<SinePositionEncodingLayer>(max_wavelength, r.name());
}

LayerPtr rotary_embedding_from_config(const json& c) {
  KerasConfigReader r("RotaryEmbedding", c);
  keras_hub::RotaryEmbeddingOptions o{.name = r.name()};
  o.max_wavelength = r.get<double>("max_wavelength", 10000.0);
  o.scaling_factor = r.get<double>("scaling_factor", 1.0);
  o.rope_type = r.get<std::string>("rope_type", "linear");
  o.sequence_axis = r.get<int64_t>("sequence_axis", 1);
  o.feature_axis = r.get<int64_t>("feature_axis", -1);
  if (const json d = r.get("denominator_dim"); !d.is_null()) {
    if (!d.is_number_integer() || d.get<int64_t>() <= 0)
      r.fail("denominator_dim", "must be a positive int or null, got " + d.dump());
    o.denominator_dim = d.get<int64_t>();
  }
  // yarn's parameters: read (refused with rope_type "yarn"), inert for the other types.
  for (const char* k : {"beta_fast", "beta_slow", "original_max_position_embeddings", "truncate"})
    r.get(k);
  r.finish();
  return std::make_shared<RotaryEmbeddingLayer>(o);
}

}  // namespace keras_hub_detail
}  // namespace lockstep
