// SimpleRNN, LSTM, GRU and Bidirectional: one recurrent op (lstm, gru, simple_rnn) over the
// whole sequence, with Keras 3's weights (kernel, recurrent_kernel, bias; saved under the
// layer's "cell", as Keras 3 keeps them), config and mask semantics.
#include "lockstep/nn/recurrent.h"

#include "lockstep/nn/config.h"
#include "nn/layers/layer_util.h"
#include "nn/layers/recurrent_slots.h"

namespace lockstep {
namespace {

enum class Cell { simple, lstm, gru };

const char* cell_class(Cell c) {
  return c == Cell::lstm ? "LSTM" : c == Cell::gru ? "GRU" : "SimpleRNN";
}
int cell_gates(Cell c) { return c == Cell::lstm ? 4 : c == Cell::gru ? 3 : 1; }

// (N, units) zeros from x's batch: x[:, 0, :1] @ zeros(1, units), without a gradient.
Value zero_state(Graph& g, Value x, int64_t units) {
  Value cell = g.add(
      op::slice, {x},
      Attrs{{"begin", std::vector<int64_t>{0, 0, 0}}, {"size", std::vector<int64_t>{-1, 1, 1}}});
  cell = g.add(op::reshape, {cell}, Attrs{{"shape", std::vector<int64_t>{-1, 1}}});
  if (g.type(cell).dtype != DType::f32) cell = g.add(op::cast, {cell}, Attrs{{"dtype", "float32"}});
  Value z =
      g.add(op::constant, {}, Attrs{{"value", 0.0}, {"shape", std::vector<int64_t>{1, units}}});
  return g.add(op::stop_gradient, {g.add(op::matmul, {cell, z})});
}

// dropout(ones like `like`): a Keras dropout mask (scaled by 1 / (1 - rate)), f32.
Value dropout_mask(Graph& g, Value like, double rate, uint64_t seed) {
  Value ones = g.add(op::stop_gradient, {g.add(op::ones_like, {like})});
  return g.add_multi(op::dropout, {ones}, Attrs{{"rate", rate}, {"seed", int64_t(seed)}})[0];
}

Value to_f32(Graph& g, Value v) {
  if (g.type(v).dtype == DType::f32) return v;
  return g.add(op::cast, {v}, Attrs{{"dtype", "float32"}});
}

Value cast_like(Graph& g, Value v, Value like) {
  const DType d = g.type(like).dtype;
  if (g.type(v).dtype == d) return v;
  return g.add(op::cast, {v}, Attrs{{"dtype", std::string(dtype_name(d))}});
}

}  // namespace

class RecurrentLayer : public Layer {
 public:
  RecurrentLayer(Cell cell, int64_t units, layers::RNNOptions o, std::string name)
      : Layer(std::move(name)), cell_(cell), units_(units), o_(std::move(o)) {
    try {
      validate();
    } catch (const Error& e) {
      LS_FAIL(cell_class(cell_), " '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return cell_class(cell_); }
  json layer_config() const override;
  void build(const std::vector<Shape>& in) override;
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override;
  bool supports_masking() const override { return true; }
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>&,
                                  const std::vector<Value>& masks, int num_outputs) override {
    std::vector<Value> out(static_cast<size_t>(num_outputs));
    if (o_.return_sequences && !masks.empty()) out[0] = masks[0];
    return out;
  }
  const layers::RNNOptions& options() const { return o_; }
  int64_t units() const { return units_; }
  Cell cell() const { return cell_; }
  int num_states() const { return cell_ == Cell::lstm ? 2 : 1; }
  /// Bidirectional: zero_output_for_mask = return_sequences (as Keras forces it), and the
  /// backward layer's sequence output in input order (Keras's flip).
  void set_zero_output_for_mask(bool z) { zero_output_for_mask_ = z; }
  void set_output_in_input_order(bool v) { output_in_input_order_ = v; }

 private:
  void validate() const;
  Attrs op_attrs(bool masked, bool rdrop) const;
  Value last_step(Graph& g, Value y) const;
  Cell cell_;
  int64_t units_;
  layers::RNNOptions o_;
  bool zero_output_for_mask_ = false;
  bool output_in_input_order_ = false;
  VariablePtr kernel_, recurrent_kernel_, bias_;
};

void RecurrentLayer::validate() const {
  LS_CHECK(units_ > 0, "units must be positive, got ", units_);
  LS_CHECK(!o_.stateful,
           "stateful=True is not supported: Lockstep's recurrent layers start every batch from "
           "zero states (use stateful=False)");
  const std::string& a = o_.activation;
  LS_CHECK(a == "tanh" || (cell_ == Cell::simple && a == "relu"), "activation \"", a,
           "\" is not supported (", cell_ == Cell::simple ? "\"tanh\" or \"relu\"" : "\"tanh\"",
           ")");
  LS_CHECK(cell_ == Cell::simple || o_.recurrent_activation == "sigmoid", "recurrent_activation \"",
           o_.recurrent_activation, "\" is not supported (only \"sigmoid\", Keras's default)");
  LS_CHECK(o_.dropout >= 0 && o_.dropout < 1, "dropout must be in [0, 1), got ", o_.dropout);
  LS_CHECK(o_.recurrent_dropout >= 0 && o_.recurrent_dropout < 1,
           "recurrent_dropout must be in [0, 1), got ", o_.recurrent_dropout);
  check_initializer(o_.kernel_initializer);
  check_initializer(o_.recurrent_initializer);
  check_initializer(o_.bias_initializer);
}

json RecurrentLayer::layer_config() const {
  json c = {{"return_sequences", o_.return_sequences},
            {"return_state", o_.return_state},
            {"go_backwards", o_.go_backwards},
            {"stateful", false},
            {"unroll", o_.unroll},
            {"zero_output_for_mask", zero_output_for_mask_},
            {"units", units_},
            {"activation", o_.activation}};
  if (cell_ != Cell::simple) c["recurrent_activation"] = o_.recurrent_activation;
  c["use_bias"] = o_.use_bias;
  c["kernel_initializer"] = layer_util::initializer_json(o_.kernel_initializer);
  c["recurrent_initializer"] = layer_util::initializer_json(o_.recurrent_initializer);
  c["bias_initializer"] = layer_util::initializer_json(o_.bias_initializer);
  if (cell_ == Cell::lstm) c["unit_forget_bias"] = o_.unit_forget_bias;
  for (const char* k :
       {"kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
        "kernel_constraint", "recurrent_constraint", "bias_constraint"})
    c[k] = nullptr;
  c["dropout"] = o_.dropout;
  c["recurrent_dropout"] = o_.recurrent_dropout;
  if (cell_ == Cell::gru) c["reset_after"] = o_.reset_after;
  c["seed"] = o_.seed == 0 ? json(nullptr) : json(o_.seed);
  return c;
}

void RecurrentLayer::build(const std::vector<Shape>& in) {
  const Shape& s = in.at(0);
  LS_CHECK(s.rank() == 3 && s[-1] > 0, class_name(), " '", name(),
           "': expected input (batch, time, features) with known features, got ", s.str());
  const int64_t G = cell_gates(cell_), H = units_;
  kernel_ = add_weight("kernel", Shape{s[-1], G * H}, o_.kernel_initializer);
  recurrent_kernel_ = add_weight("recurrent_kernel", Shape{H, G * H}, o_.recurrent_initializer);
  if (!o_.use_bias) return;
  const Shape b = cell_ == Cell::gru && o_.reset_after ? Shape{2, G * H} : Shape{G * H};
  bias_ = add_weight("bias", b, o_.bias_initializer);
  if (cell_ == Cell::lstm && o_.unit_forget_bias) {  // Keras: the forget gate's block is ones
    float* p = bias_->value.data<float>();
    for (int64_t k = H; k < 2 * H; ++k) p[k] = 1.f;
  }
}

Attrs RecurrentLayer::op_attrs(bool masked, bool rdrop) const {
  Attrs a{{"go_backwards", o_.go_backwards},
          {"masked", masked},
          {"zero_output_for_mask", zero_output_for_mask_},
          {"recurrent_dropout", rdrop}};
  if (output_in_input_order_ && o_.return_sequences) a.set("output_in_input_order", true);
  if (cell_ == Cell::gru) a.set("reset_after", o_.reset_after);
  if (cell_ == Cell::simple) a.set("nonlinearity", o_.activation.c_str());
  return a;
}

// y[:, T - 1, :] as (N, units): Keras's last output (the step processed last).
Value RecurrentLayer::last_step(Graph& g, Value y) const {
  const int64_t T = g.type(y).shape[1];
  Value l = g.add(op::slice, {y},
                  Attrs{{"begin", std::vector<int64_t>{0, T - 1, 0}},
                        {"size", std::vector<int64_t>{-1, 1, -1}}});
  return g.add(op::reshape, {l}, Attrs{{"shape", std::vector<int64_t>{-1, units_}}}, name());
}

std::vector<Value> RecurrentLayer::call(CallContext& ctx, const std::vector<Value>& in) {
  Graph& g = ctx.graph;
  Value x = in.at(0);
  const Shape s = g.type(x).shape;
  LS_CHECK(s.rank() == 3 && s[2] == kernel_->value.dim(0), class_name(), " '", name(),
           "': expected input (batch, time, ", kernel_->value.dim(0), "), got ", s.str());
  const uint64_t seed = o_.seed;
  if (ctx.training && o_.dropout > 0) {  // one mask per sequence, shared by every step
    Value step = g.add(
        op::slice, {x},
        Attrs{{"begin", std::vector<int64_t>{0, 0, 0}}, {"size", std::vector<int64_t>{-1, 1, -1}}});
    Value mask = dropout_mask(g, to_f32(g, step), o_.dropout, seed);
    x = g.add(op::mul, {x, cast_like(g, mask, x)});
  }
  Value h0 = cast_like(g, zero_state(g, x, units_), x);
  std::vector<Value> ins{x, ctx.read(kernel_), ctx.read(recurrent_kernel_)};
  if (bias_) {
    ins.push_back(ctx.read(bias_));
  } else {
    const Shape b = cell_ == Cell::gru && o_.reset_after ? Shape{2, cell_gates(cell_) * units_}
                                                         : Shape{cell_gates(cell_) * units_};
    ins.push_back(
        cast_like(g, g.add(op::constant, {}, Attrs{{"value", 0.0}, {"shape", b.vec()}}), x));
  }
  for (int k = 0; k < num_states(); ++k) ins.push_back(h0);
  const bool masked = !ctx.masks.empty() && ctx.masks[0].valid();
  if (masked) ins.push_back(ctx.masks[0]);
  const bool rdrop = ctx.training && o_.recurrent_dropout > 0;
  if (rdrop) ins.push_back(dropout_mask(g, zero_state(g, x, units_), o_.recurrent_dropout, seed));
  const OpId id = cell_ == Cell::lstm ? op::lstm : cell_ == Cell::gru ? op::gru : op::simple_rnn;
  std::vector<Value> r = g.add_multi(id, ins, op_attrs(masked, rdrop), name());
  std::vector<Value> out{o_.return_sequences ? r[0] : last_step(g, r[0])};
  if (o_.return_state)
    for (int k = 0; k < num_states(); ++k) out.push_back(r[size_t(1 + k)]);
  return out;
}

namespace {

class BidirectionalLayer : public Layer {
 public:
  BidirectionalLayer(std::shared_ptr<RecurrentLayer> fw, std::shared_ptr<RecurrentLayer> bw,
                     std::string merge_mode, std::string name)
      : Layer(std::move(name)), fw_(std::move(fw)), bw_(std::move(bw)), merge_(merge_mode) {
    LS_CHECK(merge_ == "concat" || merge_ == "sum" || merge_ == "mul" || merge_ == "ave" ||
                 merge_.empty(),
             "Bidirectional '", this->name(),
             "': merge_mode must be \"concat\", \"sum\", "
             "\"mul\", \"ave\" or None (\"\"), got \"",
             merge_, "\"");
    const auto &a = fw_->options(), &b = bw_->options();
    LS_CHECK(a.return_sequences == b.return_sequences && a.return_state == b.return_state,
             "Bidirectional '", this->name(),
             "': the forward and backward layers must agree on return_sequences and "
             "return_state");
    LS_CHECK(b.go_backwards != a.go_backwards, "Bidirectional '", this->name(),
             "': the backward layer must have go_backwards opposite to the forward layer's");
    for (auto* l : {fw_.get(), bw_.get()})
      l->set_zero_output_for_mask(l->options().return_sequences);
    bw_->set_output_in_input_order(true);
  }
  std::string class_name() const override { return "Bidirectional"; }
  json layer_config() const override {
    auto entry = [](const Layer& l) {
      return json{{"module", "keras.layers"},
                  {"class_name", l.class_name()},
                  {"config", l.config()},
                  {"registered_name", nullptr}};
    };
    return {{"merge_mode", merge_.empty() ? json(nullptr) : json(merge_)},
            {"layer", entry(*fw_)},
            {"backward_layer", entry(*bw_)}};
  }
  void build(const std::vector<Shape>& in) override {
    fw_->ensure_built(in);
    bw_->ensure_built(in);
    for (auto& w : fw_->weights()) track_weight(w);
    for (auto& w : bw_->weights()) track_weight(w);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override;
  bool supports_masking() const override { return true; }
  std::vector<Value> compute_mask(CallContext&, const std::vector<Value>&,
                                  const std::vector<Value>& masks, int num_outputs) override {
    std::vector<Value> out(static_cast<size_t>(num_outputs));
    if (fw_->options().return_sequences && !masks.empty()) {
      out[0] = masks[0];
      if (merge_.empty()) out[1] = masks[0];
    }
    return out;
  }
  const RecurrentLayer& forward_layer() const { return *fw_; }
  const RecurrentLayer& backward_layer() const { return *bw_; }

 private:
  std::shared_ptr<RecurrentLayer> fw_, bw_;
  std::string merge_;
};

std::vector<Value> BidirectionalLayer::call(CallContext& ctx, const std::vector<Value>& in) {
  Graph& g = ctx.graph;
  std::vector<Value> y = fw_->invoke(ctx, in);
  std::vector<Value> yr = bw_->invoke(ctx, in);
  Value a = cast_like(g, y[0], in.at(0)), b = cast_like(g, yr[0], in.at(0));
  std::vector<Value> out;
  if (merge_ == "concat") {
    out.push_back(g.add(op::concat, {a, b}, Attrs{{"axis", -1}}, name()));
  } else if (merge_ == "sum") {
    out.push_back(g.add(op::add, {a, b}, {}, name()));
  } else if (merge_ == "mul") {
    out.push_back(g.add(op::mul, {a, b}, {}, name()));
  } else if (merge_ == "ave") {
    out.push_back(g.add(op::scale_shift, {g.add(op::add, {a, b})}, Attrs{{"scale", 0.5}}, name()));
  } else {
    out = {a, b};
  }
  for (size_t k = 1; k < y.size(); ++k) out.push_back(y[k]);
  for (size_t k = 1; k < yr.size(); ++k) out.push_back(yr[k]);
  return out;
}

}  // namespace

std::vector<KerasWeightSlot> recurrent_weight_slots(const LayerPtr& l, const std::string& path) {
  if (auto r = std::dynamic_pointer_cast<RecurrentLayer>(l))
    return {{path, l, {}}, {path + "/cell", l, r->weights()}};
  auto b = std::dynamic_pointer_cast<BidirectionalLayer>(l);
  if (!b) return {};
  return {{path, l, {}},
          {path + "/forward_layer", l, {}},
          {path + "/forward_layer/cell", l, b->forward_layer().weights()},
          {path + "/backward_layer", l, {}},
          {path + "/backward_layer/cell", l, b->backward_layer().weights()}};
}

namespace {

std::string activation_name(KerasConfigReader& r, const char* key, const char* fallback) {
  const json& a = r.get(key);
  if (a.is_null()) return fallback;
  if (a.is_string()) return a.get<std::string>();
  if (a.is_object() && a.contains("config") && a["config"].is_object() &&
      a["config"].value("name", json()).is_string())
    return a["config"]["name"].get<std::string>();
  r.fail(key, "is " + a.dump() + "; expected a name such as \"tanh\"");
}

LayerPtr recurrent_from_config(Cell c, const json& config) {
  KerasConfigReader r(cell_class(c), config);
  layers::RNNOptions o;
  o.name = r.name();
  const int64_t units = r.get<int64_t>("units", 0);
  o.return_sequences = r.get<bool>("return_sequences", false);
  o.return_state = r.get<bool>("return_state", false);
  o.go_backwards = r.get<bool>("go_backwards", false);
  o.stateful = r.get<bool>("stateful", false);
  o.unroll = r.get<bool>("unroll", false);
  const bool zero_output = r.get<bool>("zero_output_for_mask", false);
  o.activation = activation_name(r, "activation", "tanh");
  if (c != Cell::simple)
    o.recurrent_activation = activation_name(r, "recurrent_activation", "sigmoid");
  o.use_bias = r.get<bool>("use_bias", true);
  o.kernel_initializer = r.initializer("kernel_initializer", "glorot_uniform");
  o.recurrent_initializer = r.initializer("recurrent_initializer", "orthogonal");
  o.bias_initializer = r.initializer("bias_initializer", "zeros");
  if (c == Cell::lstm) o.unit_forget_bias = r.get<bool>("unit_forget_bias", true);
  if (c == Cell::gru) o.reset_after = r.get<bool>("reset_after", true);
  for (const char* k :
       {"kernel_regularizer", "recurrent_regularizer", "bias_regularizer", "activity_regularizer",
        "kernel_constraint", "recurrent_constraint", "bias_constraint"})
    r.expect(k, {});
  o.dropout = r.get<double>("dropout", 0.0);
  o.recurrent_dropout = r.get<double>("recurrent_dropout", 0.0);
  o.seed = r.get<uint64_t>("seed", 0);
  if (c == Cell::lstm) r.expect("implementation", {json(1), json(2)});
  if (c == Cell::gru) r.expect("implementation", {json(1), json(2)});
  r.finish();
  auto l = std::make_shared<RecurrentLayer>(c, units, o, o.name);
  l->set_zero_output_for_mask(zero_output);
  return l;
}

LayerPtr bidirectional_from_config(const json& config) {
  KerasConfigReader r("Bidirectional", config);
  layers::BidirectionalOptions o;
  o.name = r.name();
  const json& m = r.get("merge_mode");
  if (!m.is_null() && !m.is_string()) r.fail("merge_mode", "is " + m.dump());
  o.merge_mode = m.is_null() ? "" : m.get<std::string>();
  const json& layer = r.get("layer");
  if (!layer.is_object()) r.fail("layer", "must be a layer config object");
  LayerHandle forward = layer_from_config(layer);
  const json& back = r.get("backward_layer");
  if (back.is_object()) o.backward_layer = layer_from_config(back);
  r.finish();
  return layers::Bidirectional(forward, o);
}

}  // namespace

void register_recurrent_layers() {
  register_layer("SimpleRNN", [](const json& c) { return recurrent_from_config(Cell::simple, c); });
  register_layer("LSTM", [](const json& c) { return recurrent_from_config(Cell::lstm, c); });
  register_layer("GRU", [](const json& c) { return recurrent_from_config(Cell::gru, c); });
  register_layer("Bidirectional", bidirectional_from_config);
}

namespace layers {

namespace {
LayerHandle make(Cell c, int64_t units, RNNOptions o, const char* base) {
  std::string n = layer_util::default_name(o.name, base);
  return LayerPtr(std::make_shared<RecurrentLayer>(c, units, std::move(o), n));
}
}  // namespace

LayerHandle SimpleRNN(int64_t units, RNNOptions o) {
  return make(Cell::simple, units, std::move(o), "simple_rnn");
}
LayerHandle LSTM(int64_t units, RNNOptions o) {
  return make(Cell::lstm, units, std::move(o), "lstm");
}
LayerHandle GRU(int64_t units, RNNOptions o) { return make(Cell::gru, units, std::move(o), "gru"); }

LayerHandle Bidirectional(LayerHandle layer, BidirectionalOptions o) {
  auto fw = layer.as<RecurrentLayer>();
  LS_CHECK(fw, "Bidirectional: the wrapped layer must be SimpleRNN, LSTM or GRU, got ",
           layer.ptr() ? layer->class_name() : std::string("none"));
  const std::string name = layer_util::default_name(o.name, "bidirectional");
  auto strip = [](const std::string& s, const std::string& p) {
    return s.rfind(p, 0) == 0 ? s.substr(p.size()) : s;
  };
  RNNOptions fo = fw->options();
  fo.name = "forward_" + strip(fw->name(), "forward_");
  auto forward = std::make_shared<RecurrentLayer>(fw->cell(), fw->units(), fo, fo.name);
  forward->set_dtype_policy(fw->dtype_policy().name);
  std::shared_ptr<RecurrentLayer> backward;
  if (o.backward_layer.ptr()) {
    backward = o.backward_layer.as<RecurrentLayer>();
    LS_CHECK(backward, "Bidirectional '", name,
             "': backward_layer must be SimpleRNN, LSTM or GRU, got ",
             o.backward_layer->class_name());
  } else {
    RNNOptions bo = fw->options();
    bo.go_backwards = !bo.go_backwards;
    bo.name = "backward_" + strip(fw->name(), "backward_");
    backward = std::make_shared<RecurrentLayer>(fw->cell(), fw->units(), bo, bo.name);
    backward->set_dtype_policy(fw->dtype_policy().name);
  }
  return LayerPtr(std::make_shared<BidirectionalLayer>(forward, backward, o.merge_mode, name));
}

}  // namespace layers
}  // namespace lockstep
