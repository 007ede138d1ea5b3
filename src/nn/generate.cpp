// GptGenerator (lockstep/nn/generate.h): the one-token decode program with its key/value
// caches, the full-recompute program (the oracle), and the sampling program both share.
//
//   read_structure   the model's layers -> Blocks (weights, sizes, options), or an error
//   build_decode     the graph of one token: caches in, logits and the token's keys/values out
//   Impl::step       one cached step (then the new rows written into the caches)
//   Impl::recompute  the model's own forward over the context (use_cache = false)
//   Impl::sample     temperature / top-k through the random_categorical op, keyed by the index
//   generate         prefill, then one token at a time; the context slides by T/2 when full
#include "lockstep/nn/generate.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include "lockstep/core/error.h"
#include "lockstep/graph/executable.h"
#include "lockstep/nn/layers.h"
#include "lockstep/ops/transformer.h"

namespace lockstep {
namespace {

using Ints = std::vector<int64_t>;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The weight of `layer` whose name ends in "/<what>" (nullptr when `optional` and absent).
VariablePtr weight(const Layer& layer, const std::string& what, bool optional = false) {
  for (const VariablePtr& v : layer.weights())
    if (ends_with(v->name, "/" + what)) return v;
  LS_CHECK(optional, "GptGenerator: layer '", layer.name(), "' (", layer.class_name(),
           ") has no weight '", what, "'");
  return nullptr;
}

// KerasHub's activation config: "relu", or {"config": "keras_hub>gelu_approximate", ...}.
std::string activation_of(const json& v) {
  std::string a = v.is_string()                                       ? v.get<std::string>()
                  : v.is_object() && v.value("config", json()).is_string() ? v["config"].get<std::string>()
                                                                       : "";
  if (a.rfind("keras_hub>", 0) == 0) a = a.substr(10);
  return a.empty() ? "linear" : a;
}

struct Norm {
  VariablePtr gamma, beta;
  double epsilon = 1e-5;
};
struct Proj {
  VariablePtr kernel, bias;
};
struct Block {  // one TransformerDecoder
  std::string name;
  Proj q, k, v, o, ff1, ff2;
  Norm attention_norm, ff_norm;
  bool normalize_first = false;
  std::string activation;
};
struct Structure {
  VariablePtr token_table, position_table;
  std::vector<Block> blocks;
  std::optional<Norm> final_norm;
  Proj head;
  std::string head_activation = "linear";
  int64_t context = 0, vocab = 0, width = 0, heads = 0, key_dim = 0;
};

Structure read_structure(const Network& net) {
  LS_CHECK(net.inputs().size() == 1 && net.outputs().size() == 1, "GptGenerator: model '",
           net.name(), "' has ", net.inputs().size(), " inputs and ", net.outputs().size(),
           " outputs; a GPT takes token ids [batch, T] and returns logits [batch, T, vocabulary]");
  Structure s;
  enum { kEmbedding, kBlocks, kHead, kDone } stage = kEmbedding;
  for (const LayerPtr& l : net.layers()) {
    const std::string cls = l->class_name();
    const json c = l->config();
    auto refuse = [&](const std::string& why) {
      LS_FAIL("GptGenerator: model '", net.name(), "', layer '", l->name(), "' (", cls, "): ",
              why, ". A GPT here is TokenAndPositionEmbedding -> TransformerDecoder x N -> ",
              "[LayerNormalization] -> Dense(vocabulary), as examples/gpt.cpp builds it");
    };
    if (cls == "InputLayer" || cls == "Dropout") continue;
    if (stage == kEmbedding) {
      if (cls != "TokenAndPositionEmbedding") refuse("expected a TokenAndPositionEmbedding first");
      if (c.value("mask_zero", false)) refuse("mask_zero = true is not supported for generation");
      s.token_table = weight(*l, "token_embedding/embeddings");
      s.position_table = weight(*l, "position_embedding/embeddings");
      s.context = s.position_table->value.shape()[0];
      s.width = s.token_table->value.shape()[1];
      stage = kBlocks;
    } else if (stage == kBlocks && cls == "TransformerDecoder") {
      if (!c.value("encoder_sequence_shape", json()).is_null())
        refuse("a decoder with cross-attention (an encoder sequence) cannot generate alone");
      Block b;
      b.name = l->name();
      auto proj = [&](const std::string& p) {
        return Proj{weight(*l, p + "/kernel"), weight(*l, p + "/bias")};
      };
      b.q = proj("self_attention/query_dense");
      b.k = proj("self_attention/key_dense");
      b.v = proj("self_attention/value_dense");
      b.o = proj("self_attention/output_dense");
      b.ff1 = proj("feedforward_intermediate_dense");
      b.ff2 = proj("feedforward_output_dense");
      const double eps = c.value("layer_norm_epsilon", 1e-5);
      b.attention_norm = {weight(*l, "self_attention_layer_norm/gamma"),
                          weight(*l, "self_attention_layer_norm/beta"), eps};
      b.ff_norm = {weight(*l, "feedforward_layer_norm/gamma"),
                   weight(*l, "feedforward_layer_norm/beta"), eps};
      b.normalize_first = c.value("normalize_first", false);
      b.activation = activation_of(c.value("activation", json("relu")));
      const Shape qs = b.q.kernel->value.shape();  // (d, heads, key_dim)
      s.heads = qs[1], s.key_dim = qs[2];
      s.blocks.push_back(std::move(b));
    } else if ((stage == kBlocks || stage == kHead) && cls == "LayerNormalization" &&
               !s.final_norm) {
      if (s.blocks.empty()) refuse("expected a TransformerDecoder before the final layer norm");
      s.final_norm = Norm{weight(*l, "gamma", true), weight(*l, "beta", true),
                          c.value("epsilon", 1e-3)};
      stage = kHead;
    } else if ((stage == kBlocks || stage == kHead) && cls == "Dense") {
      if (s.blocks.empty()) refuse("expected a TransformerDecoder before the logits");
      s.head = {weight(*l, "kernel"), weight(*l, "bias", true)};
      s.head_activation = c.value("activation", std::string("linear"));
      s.vocab = s.head.kernel->value.shape()[1];
      stage = kDone;
    } else {
      refuse(stage == kDone ? "nothing may follow the Dense logits"
                            : "not a layer of a GPT at this place");
    }
  }
  LS_CHECK(stage == kDone, "GptGenerator: model '", net.name(),
           "' does not end in a Dense(vocabulary) after its TransformerDecoders");
  return s;
}

Value reshape(Graph& g, Value x, Ints shape) {
  return g.add(op::reshape, {x}, Attrs{{"shape", std::move(shape)}});
}

// x [n, in] @ kernel (reshaped [in, out]) + bias.
Value dense(Graph& g, Value x, const Proj& p) {
  const int64_t in = g.type(x).shape[1], out = p.kernel->value.shape().numel() / in;
  Value y = g.add(op::matmul, {x, reshape(g, g.variable(p.kernel), {in, out})});
  if (p.bias) y = g.add(op::bias_add, {y, reshape(g, g.variable(p.bias), {out})});
  return y;
}

Value norm(Graph& g, Value x, const Norm& n) {
  const int64_t d = g.type(x).shape[-1];
  Value gamma = n.gamma ? g.variable(n.gamma)
                        : g.add(op::constant, {}, Attrs{{"value", 1.0}, {"shape", Ints{d}}});
  Value beta = n.beta ? g.variable(n.beta)
                      : g.add(op::constant, {}, Attrs{{"value", 0.0}, {"shape", Ints{d}}});
  return g.add_multi(op::layer_norm, {x, gamma, beta}, Attrs{{"epsilon", n.epsilon}})[0];
}

Value activate(Graph& g, Value x, const std::string& activation) {
  if (activation == "gelu_approximate")
    return g.add(op::gelu, {x}, Attrs{{"approximate", true}});
  return apply_activation(g, x, activation, "");
}

// One residual branch: x + f(norm(x)) (pre-norm) or norm(x + f(x)) (post-norm).
template <class F>
Value residual(Graph& g, Value x, const Norm& n, bool normalize_first, F&& f) {
  Value y = g.add(op::add, {f(normalize_first ? norm(g, x, n) : x), x});
  return normalize_first ? y : norm(g, y, n);
}

// The decode program: inputs token [1], position [1] (int32), then K_0, V_0, K_1, ...
// [1, T, heads, key_dim]: each block's keys and values of the positions before this one (rows
// at and after the position are ignored); outputs logits [1, vocabulary], then this token's
// k_0, v_0, k_1, ... [1, 1, heads, key_dim], which the host writes into the caches' row
// `position` (the cache inputs keep their contents between runs: no copy of a whole cache).
// Attention reads the cache's rows before the position and this token's own key and value,
// appended as row T: concat(cache, k) [1, T + 1, heads, key_dim] with the keep mask
// [positions < position, 1].
struct DecodeGraph {
  Graph g;
  std::vector<Value> inputs, outputs;
};

void build_decode(const Structure& s, DecodeGraph& d) {
  Graph& g = d.g;
  const int64_t T = s.context, H = s.heads, K = s.key_dim;
  Value token = g.input({DType::i32, Shape{1}}, "token");
  Value position = g.input({DType::i32, Shape{1}}, "position");
  d.inputs = {token, position};
  Value x = g.add(op::add, {g.add(op::gather, {g.variable(s.token_table), token}),
                            g.add(op::gather, {g.variable(s.position_table), position})});
  // keep [1, 1, 1, T + 1]: 1 for the cached rows before the position and for this token.
  Value here = g.add(op::one_hot, {position}, Attrs{{"depth", T}});  // [1, T]
  Value from_here = g.add(op::cumsum, {here}, Attrs{{"axis", int64_t(-1)}});
  Value before = g.add(op::sub, {g.add(op::ones_like, {from_here}), from_here});
  Value one = g.add(op::constant, {}, Attrs{{"value", 1.0}, {"shape", Ints{1, 1}}});
  Value keep = reshape(g, g.add(op::concat, {before, one}, Attrs{{"axis", int64_t(1)}}),
                       {1, 1, 1, T + 1});
  std::vector<Value> fresh;
  for (const Block& b : s.blocks) {
    Value cache_k = g.input({DType::f32, Shape{1, T, H, K}}, b.name + "/key_cache");
    Value cache_v = g.input({DType::f32, Shape{1, T, H, K}}, b.name + "/value_cache");
    d.inputs.push_back(cache_k);
    d.inputs.push_back(cache_v);
    x = residual(g, x, b.attention_norm, b.normalize_first, [&](Value h) {
      Value q = reshape(g, dense(g, h, b.q), {1, 1, H, K});
      Value k = reshape(g, dense(g, h, b.k), {1, 1, H, K});
      Value v = reshape(g, dense(g, h, b.v), {1, 1, H, K});
      fresh.push_back(k);
      fresh.push_back(v);
      auto with = [&](Value cache, Value row) {
        return g.add(op::concat, {cache, row}, Attrs{{"axis", int64_t(1)}});
      };
      Value att = g.add_multi(op::scaled_dot_product_attention,
                              {q, with(cache_k, k), with(cache_v, v), keep},
                              Attrs{{"scale", 1.0 / std::sqrt(double(K))}}, b.name)[0];
      return dense(g, reshape(g, att, {1, H * K}), b.o);
    });
    x = residual(g, x, b.ff_norm, b.normalize_first, [&](Value h) {
      return dense(g, activate(g, dense(g, h, b.ff1), b.activation), b.ff2);
    });
  }
  if (s.final_norm) x = norm(g, x, *s.final_norm);
  d.outputs.push_back(activate(g, dense(g, x, s.head), s.head_activation));
  for (Value f : fresh) d.outputs.push_back(f);
}

}  // namespace

struct GptGenerator::Impl {
  const Network* net;
  Structure s;
  GenerateStats stats;
  std::unique_ptr<Executable> decode, full, sampler;
  DecodeGraph decode_graph;
  Value full_ids, full_logits;
  Graph full_graph, sampler_graph;
  uint64_t sampler_seed = ~uint64_t(0);
  double sampler_temperature = -1;
  int64_t sampler_top_k = -1;

  void compile_decode() {
    if (decode) return;
    const auto t0 = Clock::now();
    build_decode(s, decode_graph);
    decode = std::make_unique<Executable>(decode_graph.g, decode_graph.inputs,
                                          decode_graph.outputs, CompileOptions{.backend = "cpu"});
    stats.compile_seconds += since(t0);
  }
  void compile_full() {
    if (full) return;
    const auto t0 = Clock::now();
    full_graph = Graph();
    full_ids = full_graph.input({net->inputs()[0].dtype(), Shape{1, s.context}}, "token_ids");
    CallContext ctx{full_graph, false, 0};
    full_logits = net->call(ctx, {full_ids}).at(0);
    if (full_graph.type(full_logits).dtype != DType::f32)
      full_logits = full_graph.add(op::cast, {full_logits}, Attrs{{"dtype", std::string("float32")}});
    full = std::make_unique<Executable>(full_graph, std::vector<Value>{full_ids},
                                        std::vector<Value>{full_logits},
                                        CompileOptions{.backend = "cpu"});
    stats.compile_seconds += since(t0);
  }
  void compile_sampler(const GenerateOptions& o) {
    if (sampler && sampler_seed == o.seed && sampler_temperature == o.temperature &&
        sampler_top_k == o.top_k)
      return;
    sampler.reset();
    sampler_graph = Graph();
    Value logits = sampler_graph.input({DType::f32, Shape{1, s.vocab}}, "logits");
    Value ids = ops::random_categorical(sampler_graph, logits, o.seed, o.temperature, o.top_k,
                                        "sampler");
    sampler = std::make_unique<Executable>(sampler_graph, std::vector<Value>{logits},
                                           std::vector<Value>{ids},
                                           CompileOptions{.backend = "cpu", .seed = o.seed});
    sampler_seed = o.seed, sampler_temperature = o.temperature, sampler_top_k = o.top_k;
  }

  // Clears every cache (a new context).
  void reset_caches() {
    for (int i = 2; i < decode->num_inputs(); ++i) {
      Tensor& c = decode->input(i);
      std::memset(c.raw(), 0, c.nbytes());
    }
  }
  // Runs token `id` at `position` through the decode program, then writes its keys and values
  // (outputs 1..) into row `position` of the caches (inputs 2..).
  const float* step(int32_t id, int64_t position) {
    decode->input(0).data<int32_t>()[0] = id;
    decode->input(1).data<int32_t>()[0] = int32_t(position);
    decode->run();
    for (int i = 2; i < decode->num_inputs(); ++i) {
      const Tensor& row = decode->output(i - 1);
      std::memcpy(static_cast<char*>(decode->input(i).raw()) + size_t(position) * row.nbytes(),
                  row.raw(), row.nbytes());
    }
    return decode->output(0).data<float>();
  }
  // The logits after tokens [begin, end) by a full pass of the model over them.
  const float* recompute(const std::vector<int32_t>& ids, size_t begin, size_t end) {
    Tensor& in = full->input(0);
    const int64_t T = s.context;
    if (in.dtype() == DType::i32) {
      int32_t* p = in.data<int32_t>();
      for (int64_t t = 0; t < T; ++t) p[t] = begin + size_t(t) < end ? ids[begin + size_t(t)] : 0;
    } else {
      LS_CHECK(in.dtype() == DType::f32, "GptGenerator: the model's input is ",
               dtype_name(in.dtype()), "; token ids must be int32 or float32");
      float* p = in.data<float>();
      for (int64_t t = 0; t < T; ++t)
        p[t] = begin + size_t(t) < end ? float(ids[begin + size_t(t)]) : 0.f;
    }
    full->run();
    return full->output(0).data<float>() + int64_t(end - begin - 1) * s.vocab;
  }
  int32_t sample(const float* logits, int64_t index, const GenerateOptions& o) {
    for (int64_t v = 0; v < s.vocab; ++v)
      LS_CHECK(std::isfinite(logits[v]), "GptGenerator: the model's logit ", v, " is ", logits[v],
               " (not finite); its weights may hold NaN or inf");
    if (o.temperature == 0) {  // greedy: the lowest id among the largest
      int64_t best = 0;
      for (int64_t v = 1; v < s.vocab; ++v)
        if (logits[v] > logits[best]) best = v;
      return int32_t(best);
    }
    std::memcpy(sampler->input(0).raw(), logits, size_t(s.vocab) * sizeof(float));
    sampler->set_step(uint64_t(index));
    sampler->run();
    return sampler->output(0).data<int32_t>()[0];
  }
};

GptGenerator::GptGenerator(const Network& model) : impl_(std::make_unique<Impl>()) {
  impl_->net = &model;
  impl_->s = read_structure(model);
  const Shape in = model.inputs()[0].shape();
  LS_CHECK(in.rank() == 2 && in[1] == impl_->s.context, "GptGenerator: model '", model.name(),
           "' takes input ", in.str(), "; expected token ids [batch, ", impl_->s.context,
           "] (its position embedding's length)");
}

GptGenerator::~GptGenerator() = default;

int64_t GptGenerator::context_length() const { return impl_->s.context; }
int64_t GptGenerator::vocabulary_size() const { return impl_->s.vocab; }
int64_t GptGenerator::num_layers() const { return int64_t(impl_->s.blocks.size()); }
const GenerateStats& GptGenerator::stats() const { return impl_->stats; }

std::vector<int32_t> GptGenerator::generate(const std::vector<int32_t>& prompt,
                                            const GenerateOptions& o) {
  Impl& m = *impl_;
  LS_CHECK(!prompt.empty(), "generate: the prompt is empty; give at least one token");
  LS_CHECK(o.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  LS_CHECK(o.temperature >= 0 && std::isfinite(o.temperature),
           "generate: temperature must be >= 0 (0: greedy), got ", o.temperature);
  LS_CHECK(o.top_k >= 0, "generate: top_k must be >= 0 (0: every token), got ", o.top_k);
  for (int32_t id : prompt)
    LS_CHECK(id >= 0 && id < m.s.vocab, "generate: prompt token ", id, " is outside [0, ",
             m.s.vocab, "), the model's vocabulary");
  (void)m.net->weights();  // a model trained on a device: its newest weights to the host
  const double compiled_before = m.stats.compile_seconds;
  m.stats = GenerateStats{.compile_seconds = compiled_before};
  o.use_cache ? m.compile_decode() : m.compile_full();
  if (o.temperature > 0) m.compile_sampler(o);

  const size_t T = size_t(m.s.context);
  std::vector<int32_t> ids = prompt;
  size_t begin = ids.size() > T ? ids.size() - T / 2 : 0;  // the context's first token
  const float* logits = nullptr;
  // Prefill: the context so far, token by token through the cache (or nothing to do).
  auto prefill = [&] {
    if (!o.use_cache) return;
    m.reset_caches();
    for (size_t i = begin; i < ids.size(); ++i) logits = m.step(ids[i], int64_t(i - begin));
  };
  const auto t0 = Clock::now();
  prefill();
  m.stats.prompt_tokens = int64_t(prompt.size());
  m.stats.prefill_seconds = since(t0);
  const auto t1 = Clock::now();
  for (int64_t n = 0; n < o.max_new_tokens; ++n) {
    if (!o.use_cache) logits = m.recompute(ids, begin, ids.size());
    const int32_t next = m.sample(logits, n, o);
    ids.push_back(next);
    if (n + 1 == o.max_new_tokens) break;
    if (ids.size() - begin >= T) {  // the context is full: keep its last T/2 tokens
      begin = ids.size() - T / 2;
      prefill();
    } else if (o.use_cache) {
      logits = m.step(next, int64_t(ids.size() - 1 - begin));
    }
  }
  m.stats.generated_tokens = o.max_new_tokens;
  m.stats.decode_seconds = since(t1);
  return ids;
}

std::vector<int32_t> bytes_to_ids(const std::string& text) {
  std::vector<int32_t> ids;
  ids.reserve(text.size());
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

std::string ids_to_bytes(const std::vector<int32_t>& ids) {
  std::string s;
  s.reserve(ids.size());
  for (int32_t id : ids) s.push_back(char(uint8_t(id)));
  return s;
}

}  // namespace lockstep
