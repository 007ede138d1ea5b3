// Optimizers (Keras 3): clipping, lr_schedule, per-variable update ops, iterations += 1.
#include "lockstep/optimizers/optimizer.h"

#include <cmath>

#include "nn/internal/names.h"

namespace lockstep {

namespace {

Value sum_of_squares(Graph& g, Value x) {
  return g.add(op::reduce_sum, {g.add(op::square, {x})},
               Attrs{{"axes", std::vector<int64_t>{}}, {"keepdims", false}});
}

// clip / max(norm, clip): 1 when norm <= clip (and when norm == 0), else clip / norm.
Value clip_scale(Graph& g, Value norm, double clip) {
  Value c = g.scalar(float(clip));
  return g.add(op::div, {c, g.add(op::maximum, {norm, c})});
}

json schedule_json(const Attrs& a) {
  static const std::map<std::string, std::string> kClass = {
      {"exponential_decay", "ExponentialDecay"},
      {"cosine_decay", "CosineDecay"},
      {"piecewise_constant_decay", "PiecewiseConstantDecay"},
      {"polynomial_decay", "PolynomialDecay"},
      {"inverse_time_decay", "InverseTimeDecay"},
      {"cosine_decay_restarts", "CosineDecayRestarts"}};
  json cfg = json::object();
  for (auto& [k, v] : a.map()) {
    if (k == "kind") continue;
    std::visit([&](auto&& x) { cfg[k] = x; }, v);
  }
  if (cfg.contains("warmup_target") && cfg["warmup_target"].get<double>() < 0)
    cfg["warmup_target"] = nullptr;
  auto it = kClass.find(a.s("kind"));
  return {{"module", "keras.optimizers.schedules"},
          {"class_name", it == kClass.end() ? a.s("kind") : it->second},
          {"config", cfg},
          {"registered_name", nullptr}};
}

json or_null(double v) { return v > 0 ? json(v) : json(nullptr); }

class SGDOpt : public Optimizer {
 public:
  SGDOpt(double momentum, bool nesterov, OptimizerOptions o)
      : Optimizer(std::move(o)), momentum_(momentum), nesterov_(nesterov) {
    LS_CHECK(momentum >= 0 && momentum <= 1, "SGD: momentum must be in [0, 1], got ", momentum);
  }
  std::string name() const override { return "SGD"; }
  json get_config() const override {
    json c = Optimizer::get_config();
    c["momentum"] = momentum_;
    c["nesterov"] = nesterov_;
    return c;
  }

 protected:
  void update(Graph& g, Value var, Value grad, Value lr, Value, const VariablePtr& v) override {
    std::vector<Value> in{var, grad, lr};
    if (momentum_ != 0) in.push_back(g.variable(slot(v, "momentum")));
    g.add_multi(
        op::sgd_update, in,
        Attrs{
            {"momentum", momentum_}, {"nesterov", nesterov_}, {"weight_decay", opts_.weight_decay}},
        "", v);
  }

 private:
  double momentum_;
  bool nesterov_;
};

class AdamOpt : public Optimizer {
 public:
  AdamOpt(std::string name, double b1, double b2, double eps, OptimizerOptions o)
      : Optimizer(std::move(o)), name_(std::move(name)), b1_(b1), b2_(b2), eps_(eps) {}
  std::string name() const override { return name_; }
  json get_config() const override {
    json c = Optimizer::get_config();
    c["beta_1"] = b1_;
    c["beta_2"] = b2_;
    c["epsilon"] = eps_;
    c["amsgrad"] = false;
    return c;
  }

 protected:
  void update(Graph& g, Value var, Value grad, Value lr, Value t, const VariablePtr& v) override {
    g.add_multi(op::adam_update,
                {var, grad, lr, g.variable(slot(v, "m")), g.variable(slot(v, "v")), t},
                Attrs{{"beta_1", b1_},
                      {"beta_2", b2_},
                      {"epsilon", eps_},
                      {"weight_decay", opts_.weight_decay}},
                "", v);
  }

 private:
  std::string name_;
  double b1_, b2_, eps_;
};

class RMSpropOpt : public Optimizer {
 public:
  RMSpropOpt(double rho, double momentum, double eps, OptimizerOptions o)
      : Optimizer(std::move(o)), rho_(rho), momentum_(momentum), eps_(eps) {}
  std::string name() const override { return "rmsprop"; }
  json get_config() const override {
    json c = Optimizer::get_config();
    c["rho"] = rho_;
    c["momentum"] = momentum_;
    c["epsilon"] = eps_;
    c["centered"] = false;
    return c;
  }

 protected:
  void update(Graph& g, Value var, Value grad, Value lr, Value, const VariablePtr& v) override {
    std::vector<Value> in{var, grad, lr, g.variable(slot(v, "velocity"))};
    if (momentum_ > 0) in.push_back(g.variable(slot(v, "momentum")));
    g.add_multi(op::rmsprop_update, in,
                Attrs{{"rho", rho_},
                      {"momentum", momentum_},
                      {"epsilon", eps_},
                      {"weight_decay", opts_.weight_decay}},
                "", v);
  }

 private:
  double rho_, momentum_, eps_;
};

template <typename T, typename... A>
OptimizerPtr make(A&&... args) {
  auto p = std::make_shared<T>(std::forward<A>(args)...);
  p->iterations()->name = p->name() + "/iterations";
  p->learning_rate_variable()->name = p->name() + "/learning_rate";
  return p;
}

}  // namespace

Optimizer::Optimizer(OptimizerOptions o) : opts_(std::move(o)) {
  LS_CHECK(opts_.learning_rate >= 0, "learning_rate must be >= 0, got ", opts_.learning_rate);
  LS_CHECK(!(opts_.clipnorm > 0 && opts_.global_clipnorm > 0),
           "only one of clipnorm and global_clipnorm can be set");
  iterations_ = std::make_shared<Variable>(Variable{"iterations", Tensor::zeros(Shape{}), false});
  learning_rate_ =
      std::make_shared<Variable>(Variable{"learning_rate", Tensor::zeros(Shape{}), false});
  learning_rate_->value.data<float>()[0] = float(opts_.learning_rate);
}

json Optimizer::get_config() const {
  json c;
  c["name"] = name();
  c["learning_rate"] =
      opts_.schedule ? schedule_json(opts_.schedule->attrs()) : json(opts_.learning_rate);
  c["weight_decay"] = or_null(opts_.weight_decay);
  c["clipnorm"] = or_null(opts_.clipnorm);
  c["global_clipnorm"] = or_null(opts_.global_clipnorm);
  c["clipvalue"] = nullptr;
  c["use_ema"] = false;
  c["ema_momentum"] = 0.99;
  c["ema_overwrite_frequency"] = nullptr;
  c["loss_scale_factor"] = nullptr;
  c["gradient_accumulation_steps"] = nullptr;
  return c;
}

double Optimizer::learning_rate() const {
  if (!opts_.schedule) return opts_.learning_rate;  // what learning_rate_ holds, unrounded
  return (*opts_.schedule)(int64_t(iterations_->value.item()));
}

void Optimizer::set_learning_rate(double learning_rate) {
  LS_CHECK(!opts_.schedule, name(),
           ": this optimizer was created with a learning-rate schedule, so its learning rate is "
           "not settable (Keras raises TypeError too); build it with a number to change the rate "
           "during training");
  LS_CHECK(learning_rate >= 0 && std::isfinite(learning_rate), name(),
           ": learning_rate must be a finite number >= 0, got ", learning_rate);
  opts_.learning_rate = learning_rate;
  learning_rate_->value.data<float>()[0] = float(learning_rate);  // in place: programs read it
}

std::vector<VariablePtr> Optimizer::variables() const {
  std::vector<VariablePtr> v{iterations_};
  v.insert(v.end(), slot_order_.begin(), slot_order_.end());
  return v;
}

VariablePtr Optimizer::slot(const VariablePtr& var, const std::string& slot_name) {
  auto& list = slots_[var.get()];
  for (auto& [n, s] : list)
    if (n == slot_name) return s;
  auto s = std::make_shared<Variable>(Variable{name() + "/" + var->name + "/" + slot_name,
                                               Tensor::zeros(var->value.shape()), false});
  list.emplace_back(slot_name, s);
  slot_order_.push_back(s);
  return s;
}

void Optimizer::apply(Graph& g, const std::vector<Value>& grads,
                      const std::vector<VariablePtr>& vars) {
  LS_CHECK(grads.size() == vars.size(), name(), ": ", grads.size(), " gradients for ", vars.size(),
           " variables");
  Value it = g.variable(iterations_);
  Value lr = opts_.schedule
                 ? g.add(op::lr_schedule, {it}, opts_.schedule->attrs(), name() + "/learning_rate")
                 : g.variable(learning_rate_);
  Value t = g.add(op::scale_shift, {it}, Attrs{{"scale", 1.0}, {"shift", 1.0}});

  std::vector<size_t> live;
  std::vector<Value> gs;
  for (size_t i = 0; i < vars.size(); ++i) {
    if (!vars[i]->trainable || !grads[i].valid()) continue;
    live.push_back(i);
    gs.push_back(grads[i]);
  }
  if (opts_.clipnorm > 0)
    for (Value& gv : gs)
      gv = g.add(op::mul,
                 {gv, clip_scale(g, g.add(op::sqrt, {sum_of_squares(g, gv)}), opts_.clipnorm)});
  if (opts_.global_clipnorm > 0 && !gs.empty()) {
    Value scale = optimizers::global_norm_scale(g, gs, opts_.global_clipnorm);
    for (Value& gv : gs) gv = g.add(op::mul, {gv, scale});
  }
  for (size_t k = 0; k < live.size(); ++k) {
    const VariablePtr& v = vars[live[k]];
    update(g, g.variable(v), gs[k], lr, t, v);
  }
  // (every replica counts the same step: nothing to combine across replicas)
  g.add_multi(op::assign_add, {it, g.scalar(1.f)}, Attrs{{"aggregation", std::string("same")}}, "",
              iterations_);
}

namespace optimizers {

Value global_norm_scale(Graph& g, const std::vector<Value>& grads, double clipnorm) {
  LS_CHECK(!grads.empty(), "global_norm_scale: no gradients");
  Value total = sum_of_squares(g, grads[0]);
  for (size_t i = 1; i < grads.size(); ++i)
    total = g.add(op::add, {total, sum_of_squares(g, grads[i])});
  return clip_scale(g, g.add(op::sqrt, {total}), clipnorm);
}

OptimizerPtr SGD(double learning_rate, double momentum, bool nesterov, OptimizerOptions o) {
  o.learning_rate = learning_rate;
  return make<SGDOpt>(momentum, nesterov, std::move(o));
}

OptimizerPtr Adam(double learning_rate, double beta_1, double beta_2, double epsilon,
                  OptimizerOptions o) {
  o.learning_rate = learning_rate;
  return make<AdamOpt>("adam", beta_1, beta_2, epsilon, std::move(o));
}

OptimizerPtr AdamW(double learning_rate, double weight_decay, double beta_1, double beta_2,
                   double epsilon, OptimizerOptions o) {
  o.learning_rate = learning_rate;
  o.weight_decay = weight_decay;
  return make<AdamOpt>("adamw", beta_1, beta_2, epsilon, std::move(o));
}

OptimizerPtr RMSprop(double learning_rate, double rho, double momentum, double epsilon,
                     OptimizerOptions o) {
  o.learning_rate = learning_rate;
  return make<RMSpropOpt>(rho, momentum, epsilon, std::move(o));
}

OptimizerPtr get(const std::string& name) {
  const std::string c = canonical_name(name);
  if (c == "sgd") return SGD();
  if (c == "adam") return Adam();
  if (c == "adamw") return AdamW();
  if (c == "rmsprop") return RMSprop();
  LS_FAIL("unknown optimizer '", name, "' (known: sgd, adam, adamw, rmsprop)");
}

}  // namespace optimizers

}  // namespace lockstep
