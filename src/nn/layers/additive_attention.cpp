// keras.layers.AdditiveAttention (Bahdanau-style): scores from tanh(query + key) weighted by a
// learned "scale" vector, masked on the value's steps, softmax, dropout, then weights @ value;
// the query's mask zeroes those output rows and is the output's mask (Keras's Attention base).
#include "lockstep/ops/transformer.h"
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

class AdditiveAttentionLayer : public Layer {
 public:
  AdditiveAttentionLayer(layers::AdditiveAttentionOptions o, std::string name)
      : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(o_.dropout >= 0 && o_.dropout < 1, "AdditiveAttention '", this->name(),
             "': dropout must be in [0, 1), got ", o_.dropout);
  }
  std::string class_name() const override { return "AdditiveAttention"; }
  bool supports_masking() const override { return true; }
  json layer_config() const override {
    return {{"use_scale", o_.use_scale},
            {"dropout", o_.dropout},
            {"seed", o_.seed == 0 ? json(nullptr) : json(o_.seed)}};
  }
  void build(const std::vector<Shape>& in) override {
    LS_CHECK(in.size() == 2 || in.size() == 3, "AdditiveAttention '", name(),
             "': expects inputs [query, value] or [query, value, key], got ", in.size(),
             " input(s)");
    const Shape &q = in[0], &v = in[1], &k = in.size() == 3 ? in[2] : in[1];
    for (const Shape* s : {&q, &v, &k})
      LS_CHECK(s->rank() == 3, "AdditiveAttention '", name(),
               "': query, value and key must be (batch, steps, dim), got ", s->str());
    LS_CHECK(q[-1] == k[-1], "AdditiveAttention '", name(), "': query ", q.str(), " and key ",
             k.str(), " must have the same last dim (additive scores add them)");
    LS_CHECK(v[1] == k[1] || v[1] < 0 || k[1] < 0, "AdditiveAttention '", name(), "': value ",
             v.str(), " and key ", k.str(), " must have as many steps");
    if (o_.use_scale) scale_ = add_weight("scale", Shape{q[-1]}, "glorot_uniform");
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const std::string& n = name();
    const Value q = in[0], v = in[1], k = in.size() == 3 ? in[2] : in[1];
    const Shape qs = g.type(q).shape, ks = g.type(k).shape;
    auto reshape = [&](Value x, std::vector<int64_t> s) {
      return g.add(op::reshape, {x}, Attrs{{"shape", s}}, n);
    };
    Value q4 = reshape(q, {qs[0], qs[1], 1, qs[2]}), k4 = reshape(k, {ks[0], 1, ks[1], ks[2]});
    Value t = g.add(op::tanh, {g.add(op::add, {q4, k4}, {}, n)}, {}, n);
    if (scale_) t = g.add(op::mul, {t, ctx.read(scale_)}, {}, n);
    Value scores = g.add(op::reduce_sum, {t}, Attrs{{"axes", std::vector<int64_t>{-1}}}, n);
    // Masking and the softmax in float32 (the weights come back in the compute dtype).
    const DType dt = g.type(scores).dtype;
    if (dt != DType::f32) scores = cast(g, scores, DType::f32);
    const Value v_mask = ctx.masks.size() > 1 ? ctx.masks[1] : Value{};
    if (v_mask.valid()) {  // where(mask, scores, scores - 1e9), as Keras
      Value m = reshape(v_mask, {ks[0], 1, ks[1]});
      Value keep =
          g.add(op::greater, {m, g.add(op::constant, {}, Attrs{{"value", 0.5}}, n)}, {}, n);
      Value big = g.add(op::scale_shift, {scores}, Attrs{{"scale", 1.0}, {"shift", -1e9}}, n);
      scores = g.add(op::where, {keep, scores, big}, {}, n);
    }
    Value w = g.add(op::softmax, {scores}, Attrs{{"axis", int64_t(-1)}}, n);
    if (ctx.training && o_.dropout > 0)
      w = g.add_multi(op::dropout, {w}, Attrs{{"rate", o_.dropout}, {"seed", int64_t(o_.seed)}},
                      n)[0];
    if (dt != DType::f32) w = cast(g, w, dt);
    Value y = g.add(op::batch_matmul, {w, v}, {}, n);
    const Value q_mask = ctx.masks.empty() ? Value{} : ctx.masks[0];
    if (q_mask.valid()) {
      Value m = reshape(q_mask, {qs[0], qs[1], 1});
      if (g.type(y).dtype != DType::f32) m = cast(g, m, g.type(y).dtype);
      y = g.add(op::mul, {y, m}, {}, n);
    }
    return {y};
  }

 private:
  static Value cast(Graph& g, Value x, DType t) {
    return g.add(op::cast, {x}, Attrs{{"dtype", std::string(dtype_name(t))}});
  }
  layers::AdditiveAttentionOptions o_;
  VariablePtr scale_;
};

}  // namespace

namespace layers {

LayerHandle AdditiveAttention(AdditiveAttentionOptions o) {
  std::string n = layer_util::default_name(o.name, "additive_attention");
  return LayerPtr(std::make_shared<AdditiveAttentionLayer>(std::move(o), n));
}

}  // namespace layers
}  // namespace lockstep
