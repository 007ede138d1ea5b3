// Keras configs, call nodes and weight-file layout of MultiHeadAttention, GroupQueryAttention
// and Attention (keras/src/layers/attention/*.py get_config and call signatures). Keras 3.15
// stores MultiHeadAttention's projections under query_dense, key_dense, value_dense and
// output_dense, GroupQueryAttention's under _query_dense, ... (each vars/0 kernel, vars/1 bias),
// with empty _softmax and _dropout_layer groups beside them.
#include <algorithm>

#include "nn/layers/attention_layers.h"
#include "nn/layers/keras_calls.h"

namespace lockstep {
namespace {

// Keys that must be absent or null (regularizers, constraints, options Lockstep lacks).
void expect_null(KerasConfigReader& r, std::initializer_list<const char*> keys) {
  for (const char* k : keys) r.expect(k, {nullptr});
}

std::optional<int64_t> seed_of(KerasConfigReader& r) {
  const json& s = r.get("seed");
  if (s.is_null()) return std::nullopt;
  if (!s.is_number_integer()) r.fail("seed", "must be an integer or null, got " + s.dump());
  return s.get<int64_t>();
}

LayerPtr mha_from_config(const json& c) {
  KerasConfigReader r("MultiHeadAttention", c);
  layers::MultiHeadAttentionOptions o{.name = r.name()};
  const int64_t heads = r.get<int64_t>("num_heads", 0), key_dim = r.get<int64_t>("key_dim", 0);
  o.value_dim = r.get<int64_t>("value_dim", 0);
  o.dropout = r.get<double>("dropout", 0.0);
  o.use_bias = r.get<bool>("use_bias", true);
  o.output_shape = r.ints("output_shape", {});
  o.attention_axes = r.ints("attention_axes", {});
  o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  o.seed = seed_of(r);
  r.expect("use_gate", {false});
  r.expect("flash_attention", {nullptr, false, true});
  expect_null(r, {"sliding_window", "kernel_regularizer", "bias_regularizer",
                  "activity_regularizer", "kernel_constraint", "bias_constraint"});
  r.finish();
  return layers::MultiHeadAttention(heads, key_dim, o);
}

LayerPtr gqa_from_config(const json& c) {
  KerasConfigReader r("GroupQueryAttention", c);
  layers::GroupQueryAttentionOptions o{.name = r.name()};
  const int64_t head_dim = r.get<int64_t>("head_dim", 0);
  const int64_t q_heads = r.get<int64_t>("num_query_heads", 0);
  const int64_t kv_heads = r.get<int64_t>("num_key_value_heads", 0);
  o.dropout = r.get<double>("dropout", 0.0);
  o.use_bias = r.get<bool>("use_bias", true);
  o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  o.seed = seed_of(r);
  r.expect("use_gate", {false});
  r.expect("flash_attention", {nullptr, false, true});
  expect_null(r, {"sliding_window", "kernel_regularizer", "bias_regularizer",
                  "activity_regularizer", "kernel_constraint", "bias_constraint"});
  r.finish();
  return layers::GroupQueryAttention(head_dim, q_heads, kv_heads, o);
}

LayerPtr attention_from_config(const json& c) {
  KerasConfigReader r("Attention", c);
  layers::AttentionOptions o{.name = r.name()};
  o.use_scale = r.get<bool>("use_scale", false);
  o.score_mode = r.get<std::string>("score_mode", "dot");
  o.dropout = r.get<double>("dropout", 0.0);
  o.seed = seed_of(r);
  r.finish();
  return layers::Attention(o);
}

// The one tensor reference a call argument holds; `what` names it in errors.
json tensor_ref(const json& arg, const std::string& layer, const char* what) {
  std::vector<json> h;
  collect_keras_args(arg, h);
  LS_CHECK(h.size() == 1, "layer '", layer, "': call argument ", what, " must be one tensor, got ",
           arg.dump().substr(0, 200));
  return h[0];
}

bool flag(const json& kwargs, const char* key, const std::string& layer) {
  if (!kwargs.contains(key) || kwargs[key].is_null()) return false;
  LS_CHECK(kwargs[key].is_boolean(), "layer '", layer, "': call argument ", key,
           " must be true or false, got ", kwargs[key].dump());
  return kwargs[key].get<bool>();
}

void refuse_unknown(const json& kwargs, std::initializer_list<const char*> known,
                    const std::string& layer) {
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    LS_CHECK(ok || it.value().is_null(), "layer '", layer, "': call argument ", it.key(),
             " is not supported (Lockstep reads query, value, key, attention_mask, "
             "use_causal_mask, return_attention_scores and training)");
  }
}

// MultiHeadAttention / GroupQueryAttention: call(query, value, key=None, ..., attention_mask,
// return_attention_scores, training, use_causal_mask).
std::vector<json> read_mha_call(Layer& layer, const json& args, const json& kwargs) {
  const std::string& n = layer.name();
  refuse_unknown(kwargs,
                 {"query", "value", "key", "attention_mask", "use_causal_mask",
                  "return_attention_scores", "training"},
                 n);
  std::vector<json> pos(args.is_array() ? args.begin() : args.end(), args.end());
  auto arg = [&](size_t i, const char* key) -> const json* {
    if (i < pos.size() && !pos[i].is_null()) return &pos[i];
    if (kwargs.contains(key) && !kwargs[key].is_null()) return &kwargs[key];
    return nullptr;
  };
  const json *q = arg(0, "query"), *v = arg(1, "value"), *k = arg(2, "key"),
             *m = arg(99, "attention_mask");
  LS_CHECK(q && v, "layer '", n, "': a call node needs query and value, got args ",
           args.dump().substr(0, 200));
  std::vector<json> refs{tensor_ref(*q, n, "query"), tensor_ref(*v, n, "value")};
  if (k) refs.push_back(tensor_ref(*k, n, "key"));
  if (m) refs.push_back(tensor_ref(*m, n, "attention_mask"));
  auto& l = dynamic_cast<MultiHeadAttentionLayer&>(layer);
  l.set_roles({.has_key = k != nullptr,
               .has_mask = m != nullptr,
               .causal = flag(kwargs, "use_causal_mask", n),
               .scores = flag(kwargs, "return_attention_scores", n)});
  return refs;
}

json write_mha_call(const Layer& layer, const std::vector<json>& in) {
  const auto& r = dynamic_cast<const MultiHeadAttentionLayer&>(layer).roles();
  json kwargs = json::object();
  size_t i = 2;
  if (r.has_key) kwargs["key"] = in.at(i++);
  if (r.has_mask) kwargs["attention_mask"] = in.at(i++);
  if (r.causal) kwargs["use_causal_mask"] = true;
  if (r.scores) kwargs["return_attention_scores"] = true;
  return {{"args", json::array({in.at(0), in.at(1)})}, {"kwargs", kwargs}};
}

// Attention: call(inputs=[query, value(, key)], mask=None, training, return_attention_scores,
// use_causal_mask).
std::vector<json> read_attention_call(Layer& layer, const json& args, const json& kwargs) {
  const std::string& n = layer.name();
  refuse_unknown(kwargs,
                 {"inputs", "mask", "use_causal_mask", "return_attention_scores", "training"}, n);
  LS_CHECK(
      !kwargs.contains("mask") || kwargs["mask"].is_null() ||
          (kwargs["mask"].is_array() && std::all_of(kwargs["mask"].begin(), kwargs["mask"].end(),
                                                    [](const json& x) { return x.is_null(); })),
      "layer '", n,
      "': an explicit mask= call argument is not supported (Lockstep takes "
      "the inputs' Keras masks)");
  std::vector<json> refs;
  collect_keras_args(args.is_array() && !args.empty() ? args : kwargs.value("inputs", json()),
                     refs);
  LS_CHECK(refs.size() == 2 || refs.size() == 3, "layer '", n,
           "': expects inputs [query, value] or [query, value, key], got ", refs.size());
  dynamic_cast<DotAttentionLayer&>(layer).set_roles(
      {.has_key = refs.size() == 3,
       .causal = flag(kwargs, "use_causal_mask", n),
       .scores = flag(kwargs, "return_attention_scores", n)});
  return refs;
}

json write_attention_call(const Layer& layer, const std::vector<json>& in) {
  const auto& r = dynamic_cast<const DotAttentionLayer&>(layer).roles();
  json kwargs = json::object();
  if (r.causal) kwargs["use_causal_mask"] = true;
  if (r.scores) kwargs["return_attention_scores"] = true;
  return {{"args", json::array({json(in)})}, {"kwargs", kwargs}};
}

std::vector<KerasWeightSlot> mha_slots(const LayerPtr& l, const std::string& path) {
  // Keras's saving names the path by the Python class, GroupedQueryAttention (whose registered
  // name is GroupQueryAttention): "layers/grouped_query_attention[_N]".
  std::string p = path;
  const std::string from = "group_query_attention", to = "grouped_query_attention";
  const size_t slash = p.rfind('/') + 1;
  if (p.compare(slash, from.size(), from) == 0) p.replace(slash, from.size(), to);
  return dynamic_cast<const MultiHeadAttentionLayer&>(*l).weight_slots(l, p);
}

bool register_attention_layers() {
  register_layer("MultiHeadAttention", mha_from_config);
  register_layer("GroupQueryAttention", gqa_from_config);
  register_layer("Attention", attention_from_config);
  for (const char* cls : {"MultiHeadAttention", "GroupQueryAttention"}) {
    register_call_convention(cls, {read_mha_call, write_mha_call});
    register_weight_slots(cls, mha_slots);
  }
  register_call_convention("Attention", {read_attention_call, write_attention_call});
  return true;
}

const bool registered = register_attention_layers();

}  // namespace
}  // namespace lockstep
