// MultiHeadAttention, GroupQueryAttention and Attention: the projections are matmuls over the
// last axis (Keras's EinsumDense kernels (d, heads, dim) read as (d, heads * dim)), the core is
// the fused scaled_dot_product_attention op, and the masks combine as Keras's do: the
// attention_mask input, the query's Keras mask (B, T, 1), the value's and key's (B, 1, S) and
// the causal rule, all of which must hold for a query to attend a key.
#include "nn/layers/attention_layers.h"
#include "nn/layers/layer_util.h"

namespace lockstep {

using layer_util::ints;

void AttentionCallRoles::set(const AttentionCallRoles& o, const std::string& layer) {
  if (!called) {
    *this = o;
    called = true;
    return;
  }
  LS_CHECK(
      has_key == o.has_key && has_mask == o.has_mask && causal == o.causal && scores == o.scores,
      "layer '", layer,
      "': called again with other call options (key, attention_mask, use_causal_mask, "
      "return_attention_scores); a shared attention layer takes the same ones each call");
}

namespace attention_impl {

Value as_f32(Graph& g, Value v) {
  return g.type(v).dtype == DType::f32 ? v : g.add(op::cast, {v}, Attrs{{"dtype", "float32"}});
}

Value dense_last(Graph& g, Value x, Value kernel, Value bias, const std::vector<int64_t>& out,
                 const std::string& name) {
  const Shape s = g.type(x).shape;
  const Shape ks = g.type(kernel).shape;
  int64_t outn = 1;
  for (int64_t d : out) outn *= d;
  const int64_t in = ks.numel() / outn;
  Value x2 = g.add(op::reshape, {x}, Attrs{{"shape", ints({-1, in})}}, name);
  Value k2 = g.add(op::reshape, {kernel}, Attrs{{"shape", ints({in, outn})}}, name);
  Value y = g.add(op::matmul, {x2, k2}, {}, name);
  if (bias.valid())
    y = g.add(op::bias_add, {y, g.add(op::reshape, {bias}, Attrs{{"shape", ints({outn})}}, name)},
              {}, name);
  std::vector<int64_t> shape{-1, s[1]};
  for (int64_t d : out) shape.push_back(d);
  return g.add(op::reshape, {y}, Attrs{{"shape", shape}}, name);
}

// The combined keep-mask (B, 1, T or 1, S or 1) in f32, or Value{} when nothing masks.
Value combined_mask(CallContext& ctx, const MaskParts& p, int64_t T, int64_t S,
                    const std::string& name) {
  Graph& g = ctx.graph;
  Value m;
  auto fold = [&](Value v, std::vector<int64_t> shape) {
    v = g.add(op::reshape, {as_f32(g, v)}, Attrs{{"shape", shape}}, name);
    m = m.valid() ? g.add(op::mul, {m, v}, {}, name) : v;
  };
  if (p.attention_mask.valid()) {
    const Shape ms = g.type(p.attention_mask).shape;
    LS_CHECK(ms.rank() == 3 && ms[1] == T && ms[2] == S, "layer '", name,
             "': attention_mask has shape ", ms.str(), ", expected (batch, ", T, ", ", S,
             ") = (batch, query length, key length)");
    fold(p.attention_mask, {-1, 1, T, S});
  }
  if (p.query.valid()) fold(p.query, {-1, 1, T, 1});
  if (p.value.valid()) fold(p.value, {-1, 1, 1, S});
  if (p.key.valid()) fold(p.key, {-1, 1, 1, S});
  return m;
}

std::vector<Value> attention_core(CallContext& ctx, Value q, Value k, Value v, Value mask,
                                  const CoreOptions& o, const std::string& name) {
  Graph& g = ctx.graph;
  Attrs a{{"causal", o.causal}, {"scale", o.scale}};
  if (ctx.training && o.dropout > 0) {
    a.set("dropout", AttrValue(o.dropout));
    a.set("seed", AttrValue(int64_t(o.seed & 0x7fffffffull)));
  }
  if (o.scores) a.set("return_weights", true);
  std::vector<Value> in{q, k, v};
  if (mask.valid()) in.push_back(mask);
  return g.add_multi(op::scaled_dot_product_attention, in, a, name);
}

}  // namespace attention_impl

// ---- MultiHeadAttention / GroupQueryAttention ---------------------------------------------

using namespace attention_impl;

MultiHeadAttentionLayer::MultiHeadAttentionLayer(Kind kind, int64_t heads, int64_t kv_heads,
                                                 int64_t key_dim, int64_t value_dim,
                                                 layers::MultiHeadAttentionOptions o,
                                                 std::string name)
    : Layer(std::move(name)),
      kind_(kind),
      heads_(heads),
      kv_heads_(kv_heads),
      key_dim_(key_dim),
      value_dim_(value_dim > 0 ? value_dim : key_dim),
      o_(std::move(o)) {
  try {
    LS_CHECK(heads_ > 0, "num_heads must be positive, got ", heads_);
    LS_CHECK(key_dim_ > 0, "key_dim must be positive, got ", key_dim_);
    LS_CHECK(kv_heads_ > 0 && heads_ % kv_heads_ == 0, "num_key_value_heads (", kv_heads_,
             ") must divide num_query_heads (", heads_, ")");
    LS_CHECK(o_.dropout >= 0 && o_.dropout < 1, "dropout must be in [0, 1), got ", o_.dropout);
    LS_CHECK(
        o_.attention_axes.empty() || (o_.attention_axes.size() == 1 &&
                                      (o_.attention_axes[0] == 1 || o_.attention_axes[0] == -2)),
        "attention_axes ", json(o_.attention_axes).dump(),
        " is not supported: Lockstep attends over the time axis of (batch, time, "
        "features) only (attention_axes None or [1])");
    check_initializer(o_.kernel_initializer);
    check_initializer(o_.bias_initializer);
  } catch (const Error& e) {
    LS_FAIL(class_name(), " '", this->name(), "': ", e.what());
  }
}

std::string MultiHeadAttentionLayer::class_name() const {
  return kind_ == Kind::mha ? "MultiHeadAttention" : "GroupQueryAttention";
}

json MultiHeadAttentionLayer::layer_config() const {
  json c;
  if (kind_ == Kind::mha) {
    c = {{"num_heads", heads_},
         {"key_dim", key_dim_},
         {"value_dim", value_dim_},
         {"dropout", o_.dropout},
         {"use_bias", o_.use_bias},
         {"use_gate", false},
         {"output_shape", o_.output_shape.empty() ? json(nullptr) : json(o_.output_shape)},
         {"attention_axes", json::array({1})},
         {"sliding_window", nullptr}};
  } else {
    c = {{"head_dim", key_dim_},    {"num_query_heads", heads_}, {"num_key_value_heads", kv_heads_},
         {"use_bias", o_.use_bias}, {"use_gate", false},         {"sliding_window", nullptr},
         {"dropout", o_.dropout}};
  }
  c["kernel_initializer"] = layer_util::initializer_json(o_.kernel_initializer);
  c["bias_initializer"] = layer_util::initializer_json(o_.bias_initializer);
  for (const char* k : {"kernel_regularizer", "bias_regularizer", "activity_regularizer",
                        "kernel_constraint", "bias_constraint"})
    c[k] = nullptr;
  c["seed"] = o_.seed ? json(*o_.seed) : json(nullptr);
  return c;
}

void MultiHeadAttentionLayer::check_inputs(const std::vector<Shape>& in) const {
  const size_t want = 2 + (roles_.has_key ? 1 : 0) + (roles_.has_mask ? 1 : 0);
  LS_CHECK(in.size() == want, class_name(), " '", name(), "': expected ", want,
           " inputs (query, value", roles_.has_key ? ", key" : "",
           roles_.has_mask ? ", attention_mask" : "", "), got ", in.size());
  const char* names[] = {"query", "value", "key"};
  for (size_t i = 0; i < 2 + (roles_.has_key ? 1u : 0u); ++i)
    LS_CHECK(in[i].rank() == 3 && in[i][-1] > 0, class_name(), " '", name(), "': ", names[i],
             " must be (batch, time, features), got ", in[i].str());
  const Shape& key = roles_.has_key ? in[2] : in[1];
  LS_CHECK(key[1] == in[1][1], class_name(), " '", name(), "': key ", key.str(), " and value ",
           in[1].str(), " must have the same length");
  if (kind_ == Kind::gqa)
    LS_CHECK(in[0][-1] == in[1][-1], class_name(), " '", name(),
             "': the last dimension of query and value must be equal, got ", in[0].str(), " and ",
             in[1].str());
}

void MultiHeadAttentionLayer::build(const std::vector<Shape>& in) {
  check_inputs(in);
  const int64_t dq = in[0][-1], dv = in[1][-1], dk = roles_.has_key ? in[2][-1] : dv;
  const std::string &ki = o_.kernel_initializer, &bi = o_.bias_initializer;
  auto proj = [&](const char* n, int64_t d, int64_t h, int64_t dim, Proj& p) {
    p.kernel = add_weight(std::string(n) + "/kernel", Shape{d, h, dim}, ki);
    if (o_.use_bias) p.bias = add_weight(std::string(n) + "/bias", Shape{h, dim}, bi);
  };
  proj("query", dq, heads_, key_dim_, q_);
  proj("key", dk, kv_heads_, key_dim_, k_);
  proj("value", dv, kv_heads_, value_dim_, v_);
  out_shape_ = o_.output_shape.empty() ? std::vector<int64_t>{dq} : o_.output_shape;
  Shape ok{heads_, value_dim_};
  for (int64_t d : out_shape_) ok.push_back(d);
  out_.kernel = add_weight("attention_output/kernel", ok, ki);
  Shape ob;
  for (int64_t d : out_shape_) ob.push_back(d);
  if (o_.use_bias) out_.bias = add_weight("attention_output/bias", ob, bi);
}

std::vector<Value> MultiHeadAttentionLayer::call(CallContext& ctx, const std::vector<Value>& in) {
  Graph& g = ctx.graph;
  std::vector<Shape> shapes;
  for (Value v : in) shapes.push_back(g.type(v).shape);
  check_inputs(shapes);
  const Value query = in[0], value = in[1], key = roles_.has_key ? in[2] : in[1];
  auto read = [&](const VariablePtr& v) { return v ? ctx.read(v) : Value{}; };
  Value q = dense_last(g, query, read(q_.kernel), read(q_.bias), {heads_, key_dim_}, name());
  Value k = dense_last(g, key, read(k_.kernel), read(k_.bias), {kv_heads_, key_dim_}, name());
  Value v = dense_last(g, value, read(v_.kernel), read(v_.bias), {kv_heads_, value_dim_}, name());
  MaskParts parts;
  auto mask_of = [&](size_t i) { return i < ctx.masks.size() ? ctx.masks[i] : Value{}; };
  parts.query = mask_of(0);
  parts.value = mask_of(1);
  if (roles_.has_key) parts.key = mask_of(2);
  if (roles_.has_mask) parts.attention_mask = in.back();
  const int64_t T = shapes[0][1], S = shapes[1][1];
  Value mask = combined_mask(ctx, parts, T, S, name());
  CoreOptions co{.causal = roles_.causal,
                 .scores = roles_.scores,
                 .scale = 1.0 / std::sqrt(double(key_dim_)),
                 .dropout = o_.dropout,
                 .seed = o_.seed ? uint64_t(*o_.seed) : seed_ ^ 0x5EEDA77Eull};
  std::vector<Value> att = attention_core(ctx, q, k, v, mask, co, name());
  // (B, T, heads, value_dim) x (heads, value_dim, out...) -> (B, T, out...)
  const Value ok = read(out_.kernel);
  Value y = dense_last(g, att[0], ok, read(out_.bias), out_shape_, name());
  std::vector<Value> r{y};
  if (roles_.scores) r.push_back(att[2]);
  return r;
}

layers::AttentionCallInfo MultiHeadAttentionLayer::info() const {
  return {.num_heads = heads_,
          .num_kv_heads = kv_heads_,
          .key_dim = key_dim_,
          .value_dim = value_dim_,
          .has_key = roles_.has_key,
          .has_mask = roles_.has_mask,
          .causal = roles_.causal,
          .scores = roles_.scores,
          .scale = 1.0 / std::sqrt(double(key_dim_))};
}

std::vector<Value> MultiHeadAttentionLayer::compute_mask(CallContext&, const std::vector<Value>&,
                                                         const std::vector<Value>& masks,
                                                         int num_outputs) {
  std::vector<Value> r(static_cast<size_t>(num_outputs));
  if (!masks.empty()) r[0] = masks[0];  // Keras: the output carries the query's mask
  return r;
}

std::vector<KerasWeightSlot> MultiHeadAttentionLayer::weight_slots(const LayerPtr& self,
                                                                   const std::string& path) const {
  const bool mha = kind_ == Kind::mha;
  auto w = [](const Proj& p) {
    std::vector<VariablePtr> r{p.kernel};
    if (p.bias) r.push_back(p.bias);
    return r;
  };
  return {{path, self, {}},
          {path + (mha ? "/query_dense" : "/_query_dense"), self, w(q_)},
          {path + (mha ? "/key_dense" : "/_key_dense"), self, w(k_)},
          {path + (mha ? "/value_dense" : "/_value_dense"), self, w(v_)},
          {path + (mha ? "/output_dense" : "/_output_dense"), self, w(out_)},
          {path + "/_softmax", self, {}},
          {path + "/_dropout_layer", self, {}}};
}

// ---- Attention -------------------------------------------------------------------------------

DotAttentionLayer::DotAttentionLayer(layers::AttentionOptions o, std::string name)
    : Layer(std::move(name)), o_(std::move(o)) {
  LS_CHECK(o_.score_mode == "dot", "Attention '", this->name(), "': score_mode \"", o_.score_mode,
           "\" is not supported (Lockstep has \"dot\" only)");
  LS_CHECK(o_.dropout >= 0 && o_.dropout < 1, "Attention '", this->name(),
           "': dropout must be in [0, 1), got ", o_.dropout);
}

json DotAttentionLayer::layer_config() const {
  return {{"use_scale", o_.use_scale},
          {"score_mode", o_.score_mode},
          {"dropout", o_.dropout},
          {"seed", o_.seed ? json(*o_.seed) : json(nullptr)}};
}

void DotAttentionLayer::build(const std::vector<Shape>& in) {
  LS_CHECK(in.size() == 2 || in.size() == 3, "Attention '", name(),
           "': expects inputs [query, value] or [query, value, key], got ", in.size());
  for (const Shape& s : in)
    LS_CHECK(s.rank() == 3, "Attention '", name(), "': inputs must be (batch, time, dim), got ",
             s.str());
  LS_CHECK(in[0][-1] == in[1][-1] && in.back()[-1] == in[0][-1], "Attention '", name(),
           "': query, value and key must have the same last dimension, got ", in[0].str(), ", ",
           in[1].str(), in.size() == 3 ? ", " + in[2].str() : "");
  if (o_.use_scale) scale_ = add_weight("scale", Shape{}, "ones");
}

std::vector<Value> DotAttentionLayer::call(CallContext& ctx, const std::vector<Value>& in) {
  Graph& g = ctx.graph;
  const Shape qs = g.type(in[0]).shape, vs = g.type(in[1]).shape;
  const int64_t T = qs[1], S = vs[1], d = qs[2];
  Value q = in[0];
  if (scale_) q = g.add(op::mul, {q, ctx.read(scale_)}, {}, name());
  auto r4 = [&](Value x, int64_t t) {
    return g.add(op::reshape, {x}, Attrs{{"shape", ints({-1, t, 1, d})}}, name());
  };
  MaskParts parts;
  auto mask_of = [&](size_t i) { return i < ctx.masks.size() ? ctx.masks[i] : Value{}; };
  parts.value = mask_of(1);
  Value mask = combined_mask(ctx, parts, T, S, name());
  CoreOptions co{.causal = roles_.causal,
                 .scores = roles_.scores,
                 .scale = 1.0,
                 .dropout = o_.dropout,
                 .seed = o_.seed ? uint64_t(*o_.seed) : seed_ ^ 0xA77Eull};
  std::vector<Value> att = attention_core(ctx, r4(q, T), r4(in.size() == 3 ? in[2] : in[1], S),
                                          r4(in[1], S), mask, co, name());
  Value y = g.add(op::reshape, {att[0]}, Attrs{{"shape", ints({-1, T, d})}}, name());
  if (Value qm = mask_of(0); qm.valid()) {  // Keras: result *= query mask
    Value m = g.add(op::reshape, {qm}, Attrs{{"shape", ints({-1, T, 1})}}, name());
    if (g.type(m).dtype != g.type(y).dtype)
      m = g.add(op::cast, {m}, Attrs{{"dtype", dtype_name(g.type(y).dtype)}}, name());
    y = g.add(op::mul, {y, m}, {}, name());
  }
  std::vector<Value> r{y};
  if (roles_.scores)
    r.push_back(g.add(op::reshape, {att[2]}, Attrs{{"shape", ints({-1, T, S})}}, name()));
  return r;
}

layers::AttentionCallInfo DotAttentionLayer::info() const {
  return {.has_key = roles_.has_key,
          .causal = roles_.causal,
          .scores = roles_.scores,
          .scale = scale_ ? double(scale_->value.to_vector().at(0)) : 1.0};
}

std::vector<Value> DotAttentionLayer::compute_mask(CallContext&, const std::vector<Value>&,
                                                   const std::vector<Value>& masks,
                                                   int num_outputs) {
  std::vector<Value> r(static_cast<size_t>(num_outputs));
  if (!masks.empty()) r[0] = masks[0];
  return r;
}

// ---- factories -------------------------------------------------------------------------------

namespace layers {

LayerHandle MultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions o) {
  std::string n = layer_util::default_name(o.name, "multi_head_attention");
  const int64_t vd = o.value_dim;
  return LayerPtr(std::make_shared<MultiHeadAttentionLayer>(
      MultiHeadAttentionLayer::Kind::mha, num_heads, num_heads, key_dim, vd, std::move(o), n));
}

LayerHandle GroupQueryAttention(int64_t head_dim, int64_t num_query_heads,
                                int64_t num_key_value_heads, GroupQueryAttentionOptions o) {
  std::string n = layer_util::default_name(o.name, "grouped_query_attention");
  MultiHeadAttentionOptions m{.value_dim = head_dim,
                              .dropout = o.dropout,
                              .use_bias = o.use_bias,
                              .kernel_initializer = o.kernel_initializer,
                              .bias_initializer = o.bias_initializer,
                              .seed = o.seed};
  return LayerPtr(std::make_shared<MultiHeadAttentionLayer>(MultiHeadAttentionLayer::Kind::gqa,
                                                            num_query_heads, num_key_value_heads,
                                                            head_dim, head_dim, std::move(m), n));
}

LayerHandle Attention(AttentionOptions o) {
  std::string n = layer_util::default_name(o.name, "attention");
  return LayerPtr(std::make_shared<DotAttentionLayer>(std::move(o), n));
}

std::optional<AttentionCallInfo> attention_call_info(const Layer& layer) {
  if (auto* m = dynamic_cast<const MultiHeadAttentionLayer*>(&layer)) return m->info();
  if (auto* a = dynamic_cast<const DotAttentionLayer*>(&layer)) return a->info();
  return std::nullopt;
}

KTensors attend(const LayerHandle& layer, const KTensor& query, const KTensor& value,
                AttendOptions o) {
  AttentionCallRoles roles{.has_key = o.key.has_value(),
                           .has_mask = o.attention_mask.has_value(),
                           .causal = o.use_causal_mask,
                           .scores = o.return_attention_scores};
  std::vector<KTensor> ins{query, value};
  if (o.key) ins.push_back(*o.key);
  if (o.attention_mask) ins.push_back(*o.attention_mask);
  if (auto* m = dynamic_cast<MultiHeadAttentionLayer*>(layer.ptr().get())) {
    m->set_roles(roles);
  } else if (auto* a = dynamic_cast<DotAttentionLayer*>(layer.ptr().get())) {
    LS_CHECK(!o.attention_mask, "Attention '", a->name(),
             "': takes no attention_mask (Keras's Attention masks with its inputs' Keras masks)");
    a->set_roles(roles);
  } else {
    LS_FAIL("layers::attend: layer '", layer->name(), "' (", layer->class_name(),
            ") is not MultiHeadAttention, GroupQueryAttention or Attention");
  }
  return layer(ins);
}

}  // namespace layers
}  // namespace lockstep
