// KerasHub's backbones (keras_hub/src/models/bert/bert_backbone.py, gpt2/gpt2_backbone.py in
// keras-hub 0.32) as Lockstep networks built from their hyperparameters, layer for layer as
// KerasHub builds them (so the weights file's paths match). Their Keras config is the
// hyperparameters: keras_hub_model_config recognises a backbone's network by its inputs and
// outputs and writes it back.
#include <mutex>

#include "lockstep/nn/embedding.h"
#include "lockstep/nn/keras_hub.h"
#include "nn/layers/keras_hub_util.h"

namespace lockstep {
namespace keras_hub_detail {
namespace {

// x[:, index, :] (Keras's GetItem op in BertBackbone's pooler).
class GetItemLayer : public Layer {
 public:
  GetItemLayer(int64_t index, std::string name) : Layer(std::move(name)), index_(index) {}
  std::string class_name() const override { return "GetItem"; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const Shape s = g.type(in.at(0)).shape;
    Value y = g.add(op::slice, {in.at(0)},
                    Attrs{{"begin", std::vector<int64_t>{0, index_, 0}},
                          {"size", std::vector<int64_t>{-1, 1, -1}}},
                    name());
    return {g.add(op::reshape, {y}, Attrs{{"shape", std::vector<int64_t>{-1, s[-1]}}}, name())};
  }

 private:
  int64_t index_;
};

// Backbones built here: their inputs' and outputs' layer calls, and their configs.
struct Built {
  std::vector<std::weak_ptr<LayerCall>> calls;
  json config;
};
std::mutex& built_mu() {
  static std::mutex m;
  return m;
}
std::vector<Built>& built() {
  static std::vector<Built> b;
  return b;
}

std::vector<std::shared_ptr<LayerCall>> io_calls(const Network& net) {
  std::vector<std::shared_ptr<LayerCall>> r;
  for (auto& t : net.inputs()) r.push_back(t.call);
  for (auto& t : net.outputs()) r.push_back(t.call);
  return r;
}

Network remember(Network net, json config) {
  std::lock_guard<std::mutex> lock(built_mu());
  auto& b = built();
  std::erase_if(b, [](const Built& e) { return e.calls.empty() || e.calls[0].expired(); });
  Built e{.config = std::move(config)};
  for (auto& c : io_calls(net)) e.calls.push_back(c);
  b.push_back(std::move(e));
  return net;
}

json dtype_json(const std::string& dtype) {
  return {{"module", "keras"},
          {"class_name", "DTypePolicy"},
          {"config", {{"name", dtype}}},
          {"registered_name", nullptr}};
}

// The layers of one backbone: each named as KerasHub names it, with the backbone's policy.
struct Maker {
  std::string dtype;
  LayerHandle operator()(LayerHandle l) const {
    l->set_dtype_policy(dtype);
    return l;
  }
};

// Binds a KerasHub layer's call to these tensor keywords (as a KerasHub config would).
void bind(const LayerHandle& l, const std::vector<std::string>& kwargs) {
  json k = json::object();
  for (auto& name : kwargs) k[name] = {{"class_name", "__keras_tensor__"}};
  dynamic_cast<KerasLayerHooks&>(*l).bind_call_kwargs(k, 1);
}

void check_sizes(const char* cls, int64_t vocab, int64_t layers, int64_t heads, int64_t hidden,
                 int64_t inter, int64_t max_len, int64_t len) {
  LS_CHECK(vocab > 0 && layers > 0 && heads > 0 && hidden > 0 && inter > 0 && max_len > 0, cls,
           ": vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim and ",
           "max_sequence_length must be positive, got ", vocab, ", ", layers, ", ", heads, ", ",
           hidden, ", ", inter, ", ", max_len);
  LS_CHECK(len > 0 && len <= max_len, cls, ": sequence_length ", len,
           " must be in [1, max_sequence_length = ", max_len, "]");
}

}  // namespace
}  // namespace keras_hub_detail

namespace keras_hub {
using namespace keras_hub_detail;  // NOLINT: the helpers above

Network BertBackbone(const BertBackboneOptions& o) {
  const int64_t t = o.sequence_length > 0 ? o.sequence_length : o.max_sequence_length;
  check_sizes("BertBackbone", o.vocabulary_size, o.num_layers, o.num_heads, o.hidden_dim,
              o.intermediate_dim, o.max_sequence_length, t);
  LS_CHECK(o.num_segments > 0, "BertBackbone: num_segments must be positive, got ", o.num_segments);
  const Maker make{o.dtype};
  KTensor ids = layers::Input({t}, "token_ids", DType::i32);
  KTensor segments = layers::Input({t}, "segment_ids", DType::i32);
  KTensor padding = layers::Input({t}, "padding_mask", DType::i32);
  KTensor tokens = make(ReversibleEmbedding(
      o.vocabulary_size, o.hidden_dim,
      {.embeddings_initializer = "truncated_normal", .name = "token_embedding"}))(ids);
  KTensor positions = make(
      PositionEmbedding(o.max_sequence_length, "truncated_normal", "position_embedding"))(tokens);
  KTensor segs = make(layers::Embedding(
      o.num_segments, o.hidden_dim,
      {.embeddings_initializer = "truncated_normal", .name = "segment_embedding"}))(segments);
  KTensor x = make(layers::Add("embeddings_add"))({tokens, positions, segs});
  x = make(layers::LayerNormalization({.epsilon = 1e-12, .name = "embeddings_layer_norm"}))(x);
  x = make(layers::Dropout(o.dropout, 0, "embeddings_dropout"))(x);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    LayerHandle enc = make(TransformerEncoder(o.intermediate_dim, o.num_heads,
                                              {.dropout = o.dropout,
                                               .activation = "gelu_approximate",
                                               .layer_norm_epsilon = 1e-12,
                                               .kernel_initializer = "truncated_normal",
                                               .name = "transformer_layer_" + std::to_string(i)}));
    bind(enc, {"padding_mask"});
    x = enc({x, padding});
  }
  KTensor first = make(LayerPtr(std::make_shared<GetItemLayer>(0, "get_item")))(x);
  KTensor pooled = make(layers::Dense(o.hidden_dim, {.activation = "tanh",
                                                     .kernel_initializer = "truncated_normal",
                                                     .name = "pooled_dense"}))(first);
  json config = {{"name", o.name},
                 {"trainable", true},
                 {"dtype", dtype_json(o.dtype)},
                 {"vocabulary_size", o.vocabulary_size},
                 {"num_layers", o.num_layers},
                 {"num_heads", o.num_heads},
                 {"hidden_dim", o.hidden_dim},
                 {"intermediate_dim", o.intermediate_dim},
                 {"dropout", o.dropout},
                 {"max_sequence_length", o.max_sequence_length},
                 {"num_segments", o.num_segments}};
  return remember(Network({ids, segments, padding}, {x, pooled}, o.name),
                  {{"module", "keras_hub.src.models.bert.bert_backbone"},
                   {"class_name", "BertBackbone"},
                   {"config", config},
                   {"registered_name", "keras_hub>BertBackbone"},
                   {"build_config", {{"input_shape", nullptr}}},
                   {"compile_config", nullptr}});
}

Network GPT2Backbone(const GPT2BackboneOptions& o) {
  const int64_t t = o.sequence_length > 0 ? o.sequence_length : o.max_sequence_length;
  check_sizes("GPT2Backbone", o.vocabulary_size, o.num_layers, o.num_heads, o.hidden_dim,
              o.intermediate_dim, o.max_sequence_length, t);
  const Maker make{o.dtype};
  KTensor ids = layers::Input({t}, "token_ids", DType::i32);
  KTensor padding = layers::Input({t}, "padding_mask", DType::i32);
  KTensor tokens = make(ReversibleEmbedding(
      o.vocabulary_size, o.hidden_dim,
      {.embeddings_initializer = "random_normal", .name = "token_embedding"}))(ids);
  KTensor positions =
      make(PositionEmbedding(o.max_sequence_length, "random_normal", "position_embedding"))(tokens);
  KTensor x = make(layers::Add("embeddings_add"))({tokens, positions});
  x = make(layers::Dropout(o.dropout, 0, "embeddings_dropout"))(x);
  for (int64_t i = 0; i < o.num_layers; ++i) {
    LayerHandle dec = make(TransformerDecoder(o.intermediate_dim, o.num_heads,
                                              {.dropout = o.dropout,
                                               .activation = "gelu_approximate",
                                               .layer_norm_epsilon = 1e-5,
                                               .kernel_initializer = "random_normal",
                                               .normalize_first = true,
                                               .name = "transformer_layer_" + std::to_string(i)}));
    bind(dec, {"decoder_padding_mask"});
    x = dec({x, padding});
  }
  x = make(layers::LayerNormalization({.epsilon = 1e-5, .name = "layer_norm"}))(x);
  json config = {{"name", o.name},
                 {"trainable", true},
                 {"dtype", dtype_json(o.dtype)},
                 {"vocabulary_size", o.vocabulary_size},
                 {"num_layers", o.num_layers},
                 {"num_heads", o.num_heads},
                 {"hidden_dim", o.hidden_dim},
                 {"intermediate_dim", o.intermediate_dim},
                 {"dropout", o.dropout},
                 {"max_sequence_length", o.max_sequence_length}};
  return remember(Network({ids, padding}, {x}, o.name),
                  {{"module", "keras_hub.src.models.gpt2.gpt2_backbone"},
                   {"class_name", "GPT2Backbone"},
                   {"config", config},
                   {"registered_name", "keras_hub>GPT2Backbone"},
                   {"build_config", {{"input_shape", nullptr}}},
                   {"compile_config", nullptr}});
}

}  // namespace keras_hub

namespace {

template <class Options>
void read_common(KerasConfigReader& r, Options& o) {
  o.name = r.name().empty() ? o.name : r.name();
  o.vocabulary_size = r.get<int64_t>("vocabulary_size", 0);
  o.num_layers = r.get<int64_t>("num_layers", 0);
  o.num_heads = r.get<int64_t>("num_heads", 0);
  o.hidden_dim = r.get<int64_t>("hidden_dim", 0);
  o.intermediate_dim = r.get<int64_t>("intermediate_dim", 0);
  o.dropout = r.get<double>("dropout", o.dropout);
  o.max_sequence_length = r.get<int64_t>("max_sequence_length", o.max_sequence_length);
}

std::string policy_of(const json& c) {
  const json d = c.value("dtype", json());
  if (d.is_string()) return d;
  if (d.is_object()) return d.value("config", json::object()).value("name", "float32");
  return "float32";
}

}  // namespace

std::optional<Network> keras_hub_model_from_config(const json& entry) {
  const std::string cls = entry.value("class_name", "");
  const json c = entry.value("config", json::object());
  if (cls == "BertBackbone") {
    KerasConfigReader r("BertBackbone", c);
    keras_hub::BertBackboneOptions o;
    read_common(r, o);
    o.num_segments = r.get<int64_t>("num_segments", 2);
    r.finish();
    o.dtype = policy_of(c);
    return keras_hub::BertBackbone(o);
  }
  if (cls == "GPT2Backbone") {
    KerasConfigReader r("GPT2Backbone", c);
    keras_hub::GPT2BackboneOptions o;
    read_common(r, o);
    r.finish();
    o.dtype = policy_of(c);
    return keras_hub::GPT2Backbone(o);
  }
  return std::nullopt;
}

std::optional<json> keras_hub_model_config(const Network& net) {
  const auto calls = keras_hub_detail::io_calls(net);
  std::lock_guard<std::mutex> lock(keras_hub_detail::built_mu());
  for (const auto& b : keras_hub_detail::built()) {
    if (b.calls.size() != calls.size()) continue;
    bool same = true;
    for (size_t i = 0; i < calls.size() && same; ++i) same = b.calls[i].lock() == calls[i];
    if (same) return b.config;
  }
  return std::nullopt;
}

}  // namespace lockstep
