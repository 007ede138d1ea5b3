// KerasHub's TransformerEncoder and TransformerDecoder (keras_hub/src/layers/modeling/
// transformer_encoder.py, transformer_decoder.py in keras-hub 0.32): multi-head attention, layer
// norms and a feed-forward block, with KerasHub's sublayer weight layout
// ("_self_attention_layer/query_dense/vars/0", ...). The attention is the fused
// scaled_dot_product_attention op (memory linear in the sequence length on cpu), between
// matmul projections.
#include <cmath>
#include <functional>

#include "lockstep/nn/keras_hub.h"
#include "nn/layers/keras_hub_util.h"

namespace lockstep {
namespace keras_hub_detail {
namespace {

using Ints = std::vector<int64_t>;

struct Proj {
  VariablePtr kernel, bias;
};
struct Mha {
  Proj q, k, v, o;
  int64_t heads = 0, key_dim = 0;
};
struct Norm {
  VariablePtr gamma, beta;
};

Value reshape(Graph& g, Value x, Ints shape, const std::string& n) {
  return g.add(op::reshape, {x}, Attrs{{"shape", std::move(shape)}}, n);
}

// x [..., in] @ kernel [in, ...out] + bias [...out] -> [-1, steps, ...out].
Value project(CallContext& ctx, Value x, const Proj& p, int64_t steps, const std::string& n) {
  Graph& g = ctx.graph;
  const Shape ks = p.kernel->value.shape(), in_shape = g.type(x).shape;
  int64_t in = 1, out = 1;
  Ints tail{-1, steps};
  const int in_dims = in_shape.rank() - 2;  // [B, T, d] -> 1; [B, T, heads, k] -> 2
  for (int i = 0; i < ks.rank(); ++i) (i < in_dims ? in : out) *= ks[i];
  for (int i = in_dims; i < ks.rank(); ++i) tail.push_back(ks[i]);
  Value k = reshape(g, cast_to(g, ctx.read(p.kernel), g.type(x).dtype, n), {in, out}, n);
  Value b = reshape(g, cast_to(g, ctx.read(p.bias), g.type(x).dtype, n), {out}, n);
  Value y =
      g.add(op::bias_add, {g.add(op::matmul, {reshape(g, x, {-1, in}, n), k}, {}, n), b}, {}, n);
  return reshape(g, y, tail, n);
}

Value dropout(CallContext& ctx, Value x, double rate, const std::string& n) {
  if (!ctx.training || rate == 0.0) return x;
  return ctx.graph.add_multi(op::dropout, {x}, Attrs{{"rate", rate}, {"seed", int64_t(0)}}, n)[0];
}

// Keras's MultiHeadAttention(query, value) with key = value, on the fused
// scaled_dot_product_attention op: `keep` is a float32 mask [B or 1, 1, T or 1, S] (1 = attend)
// or Value{}.
Value attend(CallContext& ctx, const Mha& w, Value query, Value value, Value keep, double rate,
             const std::string& n) {
  Graph& g = ctx.graph;
  const int64_t t = g.type(query).shape[1], s = g.type(value).shape[1];
  std::vector<Value> in{project(ctx, query, w.q, t, n), project(ctx, value, w.k, s, n),
                        project(ctx, value, w.v, s, n)};  // [B, T or S, heads, key_dim]
  if (keep.valid()) in.push_back(keep);
  Attrs a{{"scale", 1.0 / std::sqrt(double(w.key_dim))}};
  if (ctx.training && rate > 0)
    a.set("dropout", AttrValue(rate))
        .set("seed", AttrValue(int64_t(std::hash<std::string>{}(n)&0x7fffffff)));
  Value out = g.add_multi(op::scaled_dot_product_attention, in, a, n)[0];  // [B, T, heads, k]
  // A query whose keys are all masked: Keras's MultiHeadAttention with dropout runs its masked
  // softmax, which zeroes the masked weights afterwards (the query attends to nothing: its
  // output is the output projection's bias); without dropout it runs ops.dot_product_attention,
  // whose softmax over all -1e9 attends uniformly, as the op does.
  if (keep.valid() && rate > 0) {
    const int64_t tk = g.type(keep).shape[2];
    Value any = g.add(op::reduce_max, {keep}, Attrs{{"axes", Ints{-1}}, {"keepdims", false}}, n);
    out = g.add(op::mul,
                {out, cast_to(g, reshape(g, any, {-1, tk, 1, 1}, n), g.type(out).dtype, n)}, {}, n);
  }
  return project(ctx, out, w.o, t, n);  // [B, T, d]
}

Value layer_norm(CallContext& ctx, Value x, const Norm& p, double eps, const std::string& n) {
  Graph& g = ctx.graph;
  const DType dt = g.type(x).dtype;
  Value y = g.add_multi(op::layer_norm,
                        {cast_to(g, x, DType::f32, n), cast_to(g, ctx.read(p.gamma), DType::f32, n),
                         cast_to(g, ctx.read(p.beta), DType::f32, n)},
                        Attrs{{"epsilon", eps}}, n)[0];
  return cast_to(g, y, dt, n);
}

// A padding mask [B, S] (any dtype) as a float32 keep mask [B, 1, 1, S].
Value padding_keep(Graph& g, Value mask, const std::string& n) {
  const Shape s = g.type(mask).shape;
  LS_CHECK(s.rank() == 2, "'", n, "': a padding mask must be [batch, sequence], got ", s.str());
  return reshape(g, cast_to(g, mask, DType::f32, n), {-1, 1, 1, s[1]}, n);
}

// An attention mask [B, T, S] as a float32 keep mask [B, 1, T, S].
Value attention_keep(Graph& g, Value mask, const std::string& n) {
  const Shape s = g.type(mask).shape;
  LS_CHECK(s.rank() == 3, "'", n, "': an attention mask must be [batch, target, source], got ",
           s.str());
  return reshape(g, cast_to(g, mask, DType::f32, n), {-1, 1, s[1], s[2]}, n);
}

Value both(Graph& g, Value a, Value b, const std::string& n) {
  if (!a.valid()) return b;
  if (!b.valid()) return a;
  return g.add(op::minimum, {a, b}, {}, n);
}

std::string activation_name(const json& v) {
  std::string a = v.is_string() ? v.get<std::string>()
                  : v.is_object() && v.value("config", json()).is_string()
                      ? v["config"].get<std::string>()
                      : "";
  if (a.rfind("keras_hub>", 0) == 0) a = a.substr(10);
  return a;
}

}  // namespace

// What TransformerEncoder and TransformerDecoder share: options, weights, the blocks.
class TransformerBase : public HubLayer {
 public:
  TransformerBase(const std::string& cls, int64_t intermediate, int64_t heads,
                  keras_hub::TransformerOptions o, std::string module_file)
      : HubLayer(o.name, std::move(module_file)), inter_(intermediate), heads_(heads), o_(o) {
    LS_CHECK(inter_ > 0 && heads_ > 0, cls, " '", name(),
             "': intermediate_dim and num_heads must be positive, got ", inter_, " and ", heads_);
    LS_CHECK(o_.dropout >= 0 && o_.dropout < 1, cls, " '", name(),
             "': dropout must be in [0, 1), got ", o_.dropout);
    try {
      if (o_.activation != "gelu_approximate") layer_util::check_activation(o_.activation);
      check_initializer(o_.kernel_initializer);
      check_initializer(o_.bias_initializer);
    } catch (const Error& e) {
      LS_FAIL(cls, " '", name(), "': ", e.what());
    }
  }
  json base_config() const {
    json act = o_.activation;
    if (o_.activation == "gelu_approximate")
      act = {{"module", "builtins"},
             {"class_name", "function"},
             {"config", "keras_hub>gelu_approximate"},
             {"registered_name", "function"}};
    return {{"intermediate_dim", inter_},
            {"num_heads", heads_},
            {"dropout", o_.dropout},
            {"activation", act},
            {"layer_norm_epsilon", o_.layer_norm_epsilon},
            {"kernel_initializer", initializer_or_original(o_.kernel_initializer, kernel_json_)},
            {"bias_initializer", initializer_or_original(o_.bias_initializer, bias_json_)},
            {"normalize_first", o_.normalize_first}};
  }
  bool supports_masking() const override { return true; }
  json kernel_json_, bias_json_;

 protected:
  Mha make_mha(const std::string& prefix, int64_t d, int64_t d_kv) {
    LS_CHECK(d / heads_ > 0, class_name(), " '", name(), "': hidden size ", d,
             " is smaller than num_heads ", heads_, " (the key dimension would be 0)");
    Mha m{.heads = heads_, .key_dim = d / heads_};
    const int64_t k = m.key_dim;
    auto proj = [&](const std::string& what, Shape ks, Shape bs) {
      return Proj{add_weight(prefix + "/" + what + "/kernel", ks, o_.kernel_initializer),
                  add_weight(prefix + "/" + what + "/bias", bs, o_.bias_initializer)};
    };
    m.q = proj("query_dense", Shape{d, heads_, k}, Shape{heads_, k});
    m.k = proj("key_dense", Shape{d_kv, heads_, k}, Shape{heads_, k});
    m.v = proj("value_dense", Shape{d_kv, heads_, k}, Shape{heads_, k});
    m.o = proj("output_dense", Shape{heads_, k, d}, Shape{d});
    return m;
  }
  Norm make_norm(const std::string& prefix, int64_t d) {
    return {add_weight(prefix + "/gamma", Shape{d}, "ones"),
            add_weight(prefix + "/beta", Shape{d}, "zeros")};
  }
  void make_feedforward(int64_t d) {
    ff_norm_ = make_norm("feedforward_layer_norm", d);
    ff1_ = {add_weight("feedforward_intermediate_dense/kernel", Shape{d, inter_},
                       o_.kernel_initializer),
            add_weight("feedforward_intermediate_dense/bias", Shape{inter_}, o_.bias_initializer)};
    ff2_ = {add_weight("feedforward_output_dense/kernel", Shape{inter_, d}, o_.kernel_initializer),
            add_weight("feedforward_output_dense/bias", Shape{d}, o_.bias_initializer)};
  }
  using Slots = std::vector<std::pair<std::string, std::vector<VariablePtr>>>;
  static void add_mha_slots(Slots& s, const std::string& path, const Mha& m) {
    s.push_back({path, {}});
    for (auto& [what, p] : {std::pair{"query_dense", m.q}, std::pair{"key_dense", m.k},
                            std::pair{"value_dense", m.v}, std::pair{"output_dense", m.o}})
      s.push_back({path + "/" + what, {p.kernel, p.bias}});
  }
  // (In KerasHub's build order, which is the order of its trainable_variables and so of a
  // saved optimizer's slots: the two dense layers, then the norm.)
  void add_feedforward_slots(Slots& s) const {
    s.push_back({"_feedforward_intermediate_dense", {ff1_.kernel, ff1_.bias}});
    s.push_back({"_feedforward_output_dense", {ff2_.kernel, ff2_.bias}});
    s.push_back({"_feedforward_layer_norm", {ff_norm_.gamma, ff_norm_.beta}});
  }
  // One residual block: x + f(norm(x)) (normalize_first) or norm(x + f(x)).
  template <class F>
  Value residual(CallContext& ctx, Value x, const Norm& norm, F&& f) {
    Graph& g = ctx.graph;
    const double eps = o_.layer_norm_epsilon;
    Value y = f(o_.normalize_first ? layer_norm(ctx, x, norm, eps, name()) : x);
    y = g.add(op::add, {dropout(ctx, y, o_.dropout, name()), x}, {}, name());
    return o_.normalize_first ? y : layer_norm(ctx, y, norm, eps, name());
  }
  Value feedforward(CallContext& ctx, Value x) {
    return residual(ctx, x, ff_norm_, [&](Value h) {
      Graph& g = ctx.graph;
      const int64_t t = g.type(h).shape[1];
      Value y = project(ctx, h, ff1_, t, name());
      y = o_.activation == "gelu_approximate"
              ? g.add(op::gelu, {y}, Attrs{{"approximate", true}}, name())
              : apply_activation(g, y, o_.activation, name());
      return project(ctx, y, ff2_, t, name());
    });
  }
  // The Keras mask input `i` carries (mask_zero upstream), or Value{}.
  static Value keras_mask(const CallContext& ctx, int i) {
    return i >= 0 && size_t(i) < ctx.masks.size() ? ctx.masks[size_t(i)] : Value{};
  }
  // The keep mask of a sequence's keys, as KerasHub's merge_padding_and_attention_mask: its
  // padding mask keyword (else the Keras mask of input `mask_input`) merged with its attention
  // mask keyword.
  Value keys_keep(CallContext& ctx, const std::vector<Value>& in, const std::string& padding,
                  const std::string& attention, int mask_input) {
    Graph& g = ctx.graph;
    Value pad = kwarg_input(in, padding);
    if (!pad.valid()) pad = keras_mask(ctx, mask_input);
    Value keep = pad.valid() ? padding_keep(g, pad, name()) : Value{};
    Value att = kwarg_input(in, attention);
    return both(g, keep, att.valid() ? attention_keep(g, att, name()) : Value{}, name());
  }
  int64_t inter_, heads_;
  keras_hub::TransformerOptions o_;
  Proj ff1_, ff2_;
  Norm ff_norm_;
};

namespace {

class TransformerEncoderLayer : public TransformerBase {
 public:
  TransformerEncoderLayer(int64_t intermediate, int64_t heads, keras_hub::TransformerOptions o)
      : TransformerBase("TransformerEncoder", intermediate, heads, std::move(o),
                        "transformer_encoder") {}
  std::string class_name() const override { return "TransformerEncoder"; }
  json layer_config() const override { return base_config(); }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() == 3, "TransformerEncoder '", name(),
             "': expected inputs [batch, sequence, features], got ", s.str());
    mha_ = make_mha("self_attention", s[-1], s[-1]);
    norm_ = make_norm("self_attention_layer_norm", s[-1]);
    make_feedforward(s[-1]);
  }
  std::vector<std::pair<std::string, std::vector<VariablePtr>>> sublayer_weights() const override {
    Slots s;
    add_mha_slots(s, "_self_attention_layer", mha_);
    s.push_back({"_self_attention_layer_norm", {norm_.gamma, norm_.beta}});
    add_feedforward_slots(s);
    return s;
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Value keep = keys_keep(ctx, in, "padding_mask", "attention_mask", 0);
    // Keras's MultiHeadAttention also masks by its query's and value's Keras masks (a masked
    // query row attends uniformly, as Keras's softmax over all -1e9 does).
    if (Value m = keras_mask(ctx, 0); m.valid()) {
      Graph& g = ctx.graph;
      const int64_t t = g.type(m).shape[1];
      Value f = cast_to(g, m, DType::f32, name());
      keep = both(g, keep, reshape(g, f, {-1, 1, t, 1}, name()), name());
      keep = both(g, keep, reshape(g, f, {-1, 1, 1, t}, name()), name());
    }
    Value x = residual(ctx, in.at(0), norm_,
                       [&](Value h) { return attend(ctx, mha_, h, h, keep, o_.dropout, name()); });
    return {feedforward(ctx, x)};
  }

 protected:
  std::vector<std::string> tensor_kwargs() const override {
    return {"padding_mask", "attention_mask"};
  }
  bool bind_scalar_kwarg(const std::string& key, const json& v) override {
    if (key != "return_attention_scores") return false;
    if (v != false) fail_arg(key, "= true is not supported (the layer returns its output only)");
    return true;
  }

 private:
  Mha mha_;
  Norm norm_;
};

json shape_or_null(const std::optional<Shape>& s) {
  if (!s) return nullptr;
  json a = json::array({nullptr});
  for (int i = 1; i < s->rank(); ++i) a.push_back((*s)[i]);
  return a;
}

class TransformerDecoderLayer : public TransformerBase {
 public:
  TransformerDecoderLayer(int64_t intermediate, int64_t heads, keras_hub::TransformerOptions o)
      : TransformerBase("TransformerDecoder", intermediate, heads, std::move(o),
                        "transformer_decoder") {}
  std::string class_name() const override { return "TransformerDecoder"; }
  json layer_config() const override {
    json c = base_config();
    c["decoder_sequence_shape"] = shape_or_null(decoder_shape_);
    c["encoder_sequence_shape"] = shape_or_null(encoder_shape_);
    return c;
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() == 3, "TransformerDecoder '", name(),
             "': expected a decoder sequence [batch, sequence, features], got ", s.str());
    const int enc = kwarg_index(in.size(), "encoder_sequence");
    LS_CHECK(!expects_encoder_ || enc >= 0, "TransformerDecoder '", name(),
             "': its config's encoder_sequence_shape says it has cross-attention, but the call "
             "passes no encoder_sequence");
    decoder_shape_ = s;
    mha_ = make_mha("self_attention", s[-1], s[-1]);
    norm_ = make_norm("self_attention_layer_norm", s[-1]);
    if (enc >= 0) {
      encoder_shape_ = in.at(size_t(enc));
      LS_CHECK(encoder_shape_->rank() == 3, "TransformerDecoder '", name(),
               "': expected an encoder sequence [batch, sequence, features], got ",
               encoder_shape_->str());
      cross_ = make_mha("cross_attention", s[-1], (*encoder_shape_)[-1]);
      cross_norm_ = make_norm("cross_attention_layer_norm", s[-1]);
    }
    make_feedforward(s[-1]);
    const int64_t t = s[1];
    Tensor causal = Tensor::zeros(Shape{1, 1, t, t});
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j <= i; ++j) causal.data<float>()[i * t + j] = 1.f;
    causal_ = fixed_table(name() + "/causal_mask", std::move(causal));
  }
  std::vector<std::pair<std::string, std::vector<VariablePtr>>> sublayer_weights() const override {
    Slots s;
    add_mha_slots(s, "_self_attention_layer", mha_);
    s.push_back({"_self_attention_layer_norm", {norm_.gamma, norm_.beta}});
    if (encoder_shape_) {
      add_mha_slots(s, "_cross_attention_layer", cross_);
      s.push_back({"_cross_attention_layer_norm", {cross_norm_.gamma, cross_norm_.beta}});
    }
    add_feedforward_slots(s);
    return s;
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value keep = keys_keep(ctx, in, "decoder_padding_mask", "decoder_attention_mask", 0);
    if (o_.use_causal_mask)
      keep = both(g, keep, cast_to(g, ctx.read(causal_), DType::f32, name()), name());
    Value x = residual(ctx, in.at(0), norm_,
                       [&](Value h) { return attend(ctx, mha_, h, h, keep, o_.dropout, name()); });
    if (encoder_shape_) {
      const int enc = kwarg_index(in.size(), "encoder_sequence");
      Value cross_keep = keys_keep(ctx, in, "encoder_padding_mask", "encoder_attention_mask", enc);
      x = residual(ctx, x, cross_norm_, [&](Value h) {
        return attend(ctx, cross_, h, in.at(size_t(enc)), cross_keep, o_.dropout, name());
      });
    }
    return {feedforward(ctx, x)};
  }
  bool expects_encoder_ = false;  // the config's encoder_sequence_shape is set

 protected:
  size_t max_positional() const override { return 2; }
  std::vector<std::string> tensor_kwargs() const override {
    return {"encoder_sequence", "decoder_padding_mask", "decoder_attention_mask",
            "encoder_padding_mask", "encoder_attention_mask"};
  }
  bool bind_scalar_kwarg(const std::string& key, const json& v) override {
    if (key == "use_causal_mask") {
      if (!v.is_boolean()) fail_arg(key, "must be true or false, got " + v.dump());
      o_.use_causal_mask = v.get<bool>();
      return true;
    }
    for (const char* cache : {"self_attention_cache", "self_attention_cache_update_index",
                              "cross_attention_cache", "cross_attention_cache_update_index"})
      if (key == cache) {
        if (!v.is_null()) fail_arg(key, "is not supported (Lockstep's decoder has no cache)");
        return true;
      }
    return false;
  }
  json scalar_kwargs(const LayerCall&) const override {
    return o_.use_causal_mask ? json::object() : json{{"use_causal_mask", false}};
  }

 private:
  Mha mha_, cross_;
  Norm norm_, cross_norm_;
  std::optional<Shape> decoder_shape_, encoder_shape_;
  VariablePtr causal_;
};

keras_hub::TransformerOptions transformer_options(KerasConfigReader& r, int64_t* inter,
                                                  int64_t* heads) {
  keras_hub::TransformerOptions o{.name = r.name()};
  *inter = r.get<int64_t>("intermediate_dim", 0);
  *heads = r.get<int64_t>("num_heads", 0);
  o.dropout = r.get<double>("dropout", 0.0);
  o.activation = activation_name(r.get("activation"));
  if (o.activation.empty()) o.activation = "relu";
  if (o.activation != "gelu_approximate" && !layer_util::is_activation(o.activation))
    r.fail("activation", "names '" + o.activation + "', which Lockstep does not know (" +
                             layer_util::activation_names() + ", gelu_approximate)");
  o.layer_norm_epsilon = r.get<double>("layer_norm_epsilon", 1e-5);
  o.normalize_first = r.get<bool>("normalize_first", false);
  return o;
}

}  // namespace

LayerPtr transformer_from_config(const std::string& cls, const json& c) {
  KerasConfigReader r(cls, c);
  int64_t inter = 0, heads = 0;
  keras_hub::TransformerOptions o = transformer_options(r, &inter, &heads);
  json kernel_json, bias_json;
  o.kernel_initializer = hub_initializer(r, "kernel_initializer", "glorot_uniform", &kernel_json);
  o.bias_initializer = hub_initializer(r, "bias_initializer", "zeros", &bias_json);
  std::shared_ptr<TransformerBase> l;
  if (cls == "TransformerEncoder") {
    l = std::make_shared<TransformerEncoderLayer>(inter, heads, o);
  } else {
    r.get("decoder_sequence_shape");  // the build shapes: the call's inputs decide here
    const json enc = r.get("encoder_sequence_shape");
    auto d = std::make_shared<TransformerDecoderLayer>(inter, heads, o);
    d->expects_encoder_ = !enc.is_null();
    l = d;
  }
  r.finish();
  l->kernel_json_ = kernel_json;
  l->bias_json_ = bias_json;
  return l;
}

}  // namespace keras_hub_detail

namespace keras_hub {
using namespace keras_hub_detail;  // NOLINT: the layer classes above

LayerHandle TransformerEncoder(int64_t intermediate_dim, int64_t num_heads, TransformerOptions o) {
  o.name = layer_util::default_name(o.name, "transformer_encoder");
  return LayerPtr(std::make_shared<TransformerEncoderLayer>(intermediate_dim, num_heads, o));
}

LayerHandle TransformerDecoder(int64_t intermediate_dim, int64_t num_heads, TransformerOptions o) {
  o.name = layer_util::default_name(o.name, "transformer_decoder");
  return LayerPtr(std::make_shared<TransformerDecoderLayer>(intermediate_dim, num_heads, o));
}

}  // namespace keras_hub
}  // namespace lockstep
