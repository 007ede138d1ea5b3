// KerasHub's embedding layers (keras_hub/src/layers/modeling/*.py in keras-hub 0.32):
// PositionEmbedding, ReversibleEmbedding, TokenAndPositionEmbedding, SinePositionEncoding and
// RotaryEmbedding, composed of existing ops (gather, slice, matmul, mul, concat); the sine and
// rotary tables are computed on the host for the input's static sequence length.
#include <cmath>

#include "lockstep/nn/keras_hub.h"
#include "nn/layers/keras_hub_util.h"

namespace lockstep {
namespace keras_hub_detail {
namespace {

std::string uniform_name(std::string init) { return init == "uniform" ? "random_uniform" : init; }

// rows [start, start + T) of a [L, F] table for inputs [..., T, F].
Value position_rows(Graph& g, Value table, int64_t start, int64_t steps, const std::string& n) {
  return g.add(
      op::slice, {table},
      Attrs{{"begin", std::vector<int64_t>{start, 0}}, {"size", std::vector<int64_t>{steps, -1}}},
      n);
}

void check_positions(const Layer& l, const Shape& s, int64_t start, int64_t length) {
  LS_CHECK(s.rank() >= 2, l.class_name(), " '", l.name(),
           "': expected inputs [batch, ..., sequence, features], got ", s.str());
  LS_CHECK(start + s[-2] <= length, l.class_name(), " '", l.name(), "': a sequence of ", s[-2],
           " steps from start_index ", start, " does not fit its sequence_length ", length);
}

class PositionEmbeddingLayer : public HubLayer {
 public:
  PositionEmbeddingLayer(int64_t length, std::string init, std::string name)
      : HubLayer(std::move(name), "position_embedding"), length_(length), init_(std::move(init)) {
    LS_CHECK(length_ > 0, "PositionEmbedding '", this->name(),
             "': sequence_length must be a positive integer, got ", length_);
    check_initializer(init_);
  }
  std::string class_name() const override { return "PositionEmbedding"; }
  json layer_config() const override {
    return {{"sequence_length", length_},
            {"initializer", initializer_or_original(init_, init_json_)}};
  }
  bool supports_masking() const override { return true; }  // Keras ignores the mask
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>&,
                                  const std::vector<Value>&, int n) override {
    return std::vector<Value>(size_t(n));
  }
  void build(const std::vector<Shape>& in) override {
    check_positions(*this, in.at(0), start_index_, length_);
    table_ = add_weight("embeddings", Shape{length_, in.at(0)[-1]}, init_);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = g.type(in.at(0)).shape;
    check_positions(*this, s, start_index_, length_);
    Value rows = position_rows(g, ctx.read(table_), start_index_, s[-2], name());
    return {broadcast_like(g, in.at(0), rows, name())};
  }
  json init_json_;  // the config's initializer when Lockstep builds a stand-in for it

 protected:
  bool takes_start_index() const override { return true; }

 private:
  int64_t length_;
  std::string init_;
  VariablePtr table_;
};

// A table lookup (integer ids) or logits (float inputs).
class ReversibleEmbeddingLayer : public HubLayer {
 public:
  ReversibleEmbeddingLayer(int64_t in_dim, int64_t out_dim, keras_hub::ReversibleEmbeddingOptions o)
      : HubLayer(o.name, "reversible_embedding"), in_(in_dim), out_(out_dim), o_(std::move(o)) {
    o_.embeddings_initializer = uniform_name(o_.embeddings_initializer);
    LS_CHECK(in_ > 0 && out_ > 0, "ReversibleEmbedding '", name(),
             "': input_dim and output_dim must be positive, got ", in_, " and ", out_);
    LS_CHECK(!o_.logit_soft_cap || *o_.logit_soft_cap > 0, "ReversibleEmbedding '", name(),
             "': logit_soft_cap must be positive, got ", o_.logit_soft_cap.value_or(0));
    check_initializer(o_.embeddings_initializer);
  }
  std::string class_name() const override { return "ReversibleEmbedding"; }
  json layer_config() const override {
    return {
        {"input_dim", in_},
        {"output_dim", out_},
        {"embeddings_initializer", initializer_or_original(o_.embeddings_initializer, init_json_)},
        {"embeddings_regularizer", nullptr},
        {"activity_regularizer", nullptr},
        {"embeddings_constraint", nullptr},
        {"mask_zero", o_.mask_zero},
        {"quantization_config", nullptr},
        {"tie_weights", o_.tie_weights},
        {"reverse_dtype", nullptr},
        {"logit_soft_cap", o_.logit_soft_cap ? json(*o_.logit_soft_cap) : json(nullptr)}};
  }
  void build(const std::vector<Shape>&) override {
    table_ = add_weight("embeddings", Shape{in_, out_}, o_.embeddings_initializer);
    if (!o_.tie_weights)
      reverse_ = add_weight("reverse_embeddings", Shape{out_, in_}, o_.embeddings_initializer);
  }
  bool supports_masking() const override { return true; }
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& in,
                                  const std::vector<Value>&, int n) override {
    if (!o_.mask_zero || is_float(ctx.graph.type(in.at(0)).dtype))
      return std::vector<Value>(size_t(n));
    Graph& g = ctx.graph;
    Value ids = cast_to(g, in.at(0), DType::f32, name() + "/mask");
    Value keep = g.add(op::not_equal, {ids, g.add(op::zeros_like, {ids})}, {}, name() + "/mask");
    return {cast_to(g, keep, DType::f32, name() + "/mask")};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value x = in.at(0);
    return {is_float(ctx.graph.type(x).dtype) ? logits(ctx, x) : embed(ctx, x)};
  }
  Value embed(CallContext& ctx, Value ids) {
    Graph& g = ctx.graph;
    const DType t = g.type(ids).dtype;
    if (t != DType::i32 && t != DType::i64) ids = cast_to(g, ids, DType::i32, name());
    Value y = g.add(op::gather, {ctx.read(table_), ids}, {}, name());
    return cast_to(g, y, compute_dtype(), name());
  }
  // [..., output_dim] -> [..., input_dim] (KerasHub's reverse=True).
  Value logits(CallContext& ctx, Value x) {
    Graph& g = ctx.graph;
    const Shape s = g.type(x).shape;
    LS_CHECK(s[-1] == out_, "ReversibleEmbedding '", name(), "': reverse=True takes features of ",
             out_, " on the last axis, got ", s.str());
    Value flat = g.add(op::reshape, {x}, Attrs{{"shape", std::vector<int64_t>{-1, out_}}}, name());
    Value w = cast_to(g, ctx.read(reverse_ ? reverse_ : table_), g.type(x).dtype, name());
    Value y = g.add(op::matmul, {flat, w}, Attrs{{"transpose_b", !reverse_}}, name());
    if (o_.logit_soft_cap) {
      const double cap = *o_.logit_soft_cap;
      y = g.add(op::scale_shift, {y}, Attrs{{"scale", 1.0 / cap}, {"shift", 0.0}}, name());
      y = g.add(op::scale_shift, {g.add(op::tanh, {y}, {}, name())},
                Attrs{{"scale", cap}, {"shift", 0.0}}, name());
    }
    std::vector<int64_t> out = s.vec();
    out[0] = -1;
    out.back() = in_;
    return g.add(op::reshape, {y}, Attrs{{"shape", out}}, name());
  }
  json init_json_;

 protected:
  bool computes_in_f32() const override { return false; }
  bool autocasts_variables() const override { return false; }  // Keras reads the f32 table
  bool bind_scalar_kwarg(const std::string& key, const json& v) override {
    if (key != "reverse") return false;
    if (!v.is_boolean()) fail_arg(key, "must be true or false, got " + v.dump().substr(0, 80));
    return true;  // the input says which: integer ids embed, float features give logits
  }
  json scalar_kwargs(const LayerCall& call) const override {
    const bool reverse = is_float(call.inputs.at(0).dtype());
    return reverse ? json{{"reverse", true}} : json::object();
  }

 private:
  static bool is_float(DType t) { return t == DType::f32 || t == DType::bf16; }
  int64_t in_, out_;
  keras_hub::ReversibleEmbeddingOptions o_;
  VariablePtr table_, reverse_;
};

// ReversibleEmbedding's lookup plus PositionEmbedding's rows, its weights under KerasHub's
// sublayer paths.
class TokenAndPositionEmbeddingLayer : public HubLayer {
 public:
  TokenAndPositionEmbeddingLayer(int64_t vocab, int64_t length, int64_t dim,
                                 keras_hub::TokenAndPositionEmbeddingOptions o)
      : HubLayer(o.name, "token_and_position_embedding"),
        vocab_(vocab),
        length_(length),
        dim_(dim),
        o_(std::move(o)) {
    o_.embeddings_initializer = uniform_name(o_.embeddings_initializer);
    LS_CHECK(vocab_ > 0 && length_ > 0 && dim_ > 0, "TokenAndPositionEmbedding '", name(),
             "': vocabulary_size, sequence_length and embedding_dim must be positive, got ", vocab_,
             ", ", length_, " and ", dim_);
    check_initializer(o_.embeddings_initializer);
  }
  std::string class_name() const override { return "TokenAndPositionEmbedding"; }
  json layer_config() const override {
    return {
        {"vocabulary_size", vocab_},
        {"sequence_length", length_},
        {"embedding_dim", dim_},
        {"embeddings_initializer", initializer_or_original(o_.embeddings_initializer, init_json_)},
        {"tie_weights", o_.tie_weights},
        {"mask_zero", o_.mask_zero}};
  }
  void build(const std::vector<Shape>& in) override {
    LS_CHECK(in.at(0).rank() >= 2, "TokenAndPositionEmbedding '", name(),
             "': expected ids [batch, ..., sequence], got ", in.at(0).str());
    const std::string& init = o_.embeddings_initializer;
    token_ = add_weight("token_embedding/embeddings", Shape{vocab_, dim_}, init);
    if (!o_.tie_weights)
      reverse_ = add_weight("token_embedding/reverse_embeddings", Shape{dim_, vocab_}, init);
    position_ = add_weight("position_embedding/embeddings", Shape{length_, dim_}, init);
  }
  std::vector<std::pair<std::string, std::vector<VariablePtr>>> sublayer_weights() const override {
    std::vector<VariablePtr> token{token_};
    if (reverse_) token.push_back(reverse_);
    return {{"token_embedding", token}, {"position_embedding", {position_}}};
  }
  bool supports_masking() const override { return o_.mask_zero; }
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& in,
                                  const std::vector<Value>&, int n) override {
    if (!o_.mask_zero) return std::vector<Value>(size_t(n));
    Graph& g = ctx.graph;
    Value ids = cast_to(g, in.at(0), DType::f32, name() + "/mask");
    Value keep = g.add(op::not_equal, {ids, g.add(op::zeros_like, {ids})}, {}, name() + "/mask");
    return {cast_to(g, keep, DType::f32, name() + "/mask")};
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value ids = in.at(0);
    const DType t = g.type(ids).dtype;
    if (t != DType::i32 && t != DType::i64) ids = cast_to(g, ids, DType::i32, name());
    Value tokens =
        cast_to(g, g.add(op::gather, {ctx.read(token_), ids}, {}, name()), compute_dtype(), name());
    const Shape s = g.type(tokens).shape;
    check_positions(*this, s, start_index_, length_);
    Value rows = cast_to(g, position_rows(g, ctx.read(position_), start_index_, s[-2], name()),
                         compute_dtype(), name());
    return {g.add(op::add, {tokens, rows}, {}, name())};
  }
  json init_json_;

 protected:
  bool takes_start_index() const override { return true; }
  bool autocasts_variables() const override { return false; }  // Keras reads the f32 tables

 private:
  int64_t vocab_, length_, dim_;
  keras_hub::TokenAndPositionEmbeddingOptions o_;
  VariablePtr token_, reverse_, position_;
};

}  // namespace
}  // namespace keras_hub_detail

namespace keras_hub {
using namespace keras_hub_detail;  // NOLINT: the layer classes above

LayerHandle PositionEmbedding(int64_t sequence_length, std::string initializer, std::string name) {
  return LayerPtr(std::make_shared<PositionEmbeddingLayer>(
      sequence_length, uniform_name(initializer),
      layer_util::default_name(name, "position_embedding")));
}

LayerHandle ReversibleEmbedding(int64_t input_dim, int64_t output_dim,
                                ReversibleEmbeddingOptions o) {
  o.name = layer_util::default_name(o.name, "reversible_embedding");
  return LayerPtr(std::make_shared<ReversibleEmbeddingLayer>(input_dim, output_dim, o));
}

LayerHandle TokenAndPositionEmbedding(int64_t vocabulary_size, int64_t sequence_length,
                                      int64_t embedding_dim, TokenAndPositionEmbeddingOptions o) {
  o.name = layer_util::default_name(o.name, "token_and_position_embedding");
  return LayerPtr(std::make_shared<TokenAndPositionEmbeddingLayer>(vocabulary_size, sequence_length,
                                                                   embedding_dim, o));
}

}  // namespace keras_hub

namespace keras_hub_detail {
namespace {

// Keys every KerasHub embedding config may carry with no effect here (null / Keras defaults).
void read_inert(KerasConfigReader& r) {
  r.expect("embeddings_regularizer", {nullptr});
  r.expect("activity_regularizer", {nullptr});
  r.expect("embeddings_constraint", {nullptr});
  r.expect("quantization_config", {nullptr});
  r.expect("reverse_dtype", {nullptr, "float32"});
}

}  // namespace

LayerPtr position_embedding_from_config(const json& c) {
  KerasConfigReader r("PositionEmbedding", c);
  const int64_t length = r.get<int64_t>("sequence_length", 0);
  json original;
  const std::string init = hub_initializer(r, "initializer", "glorot_uniform", &original);
  r.finish();
  auto l = std::make_shared<PositionEmbeddingLayer>(length, uniform_name(init), r.name());
  l->init_json_ = original;
  return l;
}

LayerPtr reversible_embedding_from_config(const json& c) {
  KerasConfigReader r("ReversibleEmbedding", c);
  keras_hub::ReversibleEmbeddingOptions o{.name = r.name()};
  const int64_t in = r.get<int64_t>("input_dim", 0), out = r.get<int64_t>("output_dim", 0);
  o.tie_weights = r.get<bool>("tie_weights", true);
  o.mask_zero = r.get<bool>("mask_zero", false);
  json original;
  o.embeddings_initializer =
      uniform_name(hub_initializer(r, "embeddings_initializer", "random_uniform", &original));
  if (const json cap = r.get("logit_soft_cap"); !cap.is_null()) {
    if (!cap.is_number()) r.fail("logit_soft_cap", "must be a number or null, got " + cap.dump());
    o.logit_soft_cap = cap.get<double>();
  }
  read_inert(r);
  r.finish();
  auto l = std::make_shared<ReversibleEmbeddingLayer>(in, out, o);
  l->init_json_ = original;
  return l;
}

LayerPtr token_and_position_embedding_from_config(const json& c) {
  KerasConfigReader r("TokenAndPositionEmbedding", c);
  keras_hub::TokenAndPositionEmbeddingOptions o{.name = r.name()};
  const int64_t vocab = r.get<int64_t>("vocabulary_size", 0);
  const int64_t length = r.get<int64_t>("sequence_length", 0);
  const int64_t dim = r.get<int64_t>("embedding_dim", 0);
  o.tie_weights = r.get<bool>("tie_weights", true);
  o.mask_zero = r.get<bool>("mask_zero", false);
  json original;
  o.embeddings_initializer =
      uniform_name(hub_initializer(r, "embeddings_initializer", "random_uniform", &original));
  r.finish();
  auto l = std::make_shared<TokenAndPositionEmbeddingLayer>(vocab, length, dim, o);
  l->init_json_ = original;
  return l;
}

}  // namespace keras_hub_detail
}  // namespace lockstep
