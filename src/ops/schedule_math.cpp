// The learning-rate schedule formulas (Keras 3 semantics), keyed by the attrs of the
// "lr_schedule" op: one definition used by the op's kernels and by train's schedule objects.
#include "ops/internal/schedule_math.h"

#include <algorithm>
#include <cmath>

#include "lockstep/graph/op_registry.h"

namespace lockstep::ops {

namespace {

constexpr OpId kOp = op::lr_schedule;

double exponential(const Attrs& a, double step) {
  double p = step / double(attr_i(kOp, a, "decay_steps"));
  if (attr_b(kOp, a, "staircase")) p = std::floor(p);
  return attr_f(kOp, a, "initial_learning_rate") * std::pow(attr_f(kOp, a, "decay_rate"), p);
}

// keras.optimizers.schedules.CosineDecay.__call__ (warmup_target < 0 means None).
double cosine(const Attrs& a, double step) {
  double initial = attr_f(kOp, a, "initial_learning_rate");
  double decay_steps = double(attr_i(kOp, a, "decay_steps"));
  double alpha = attr_f(kOp, a, "alpha");
  double warmup_target = attr_f(kOp, a, "warmup_target");
  double warmup_steps = double(attr_i(kOp, a, "warmup_steps"));
  auto decay = [&](double s, double from) {
    double frac = s / decay_steps;
    double cosine_decayed = 0.5 * (1.0 + std::cos(M_PI * frac));
    return from * ((1.0 - alpha) * cosine_decayed + alpha);
  };
  if (warmup_target < 0) return decay(std::min(step, decay_steps), initial);
  step = std::min(step, decay_steps + warmup_steps);
  if (step < warmup_steps) return (warmup_target - initial) * (step / warmup_steps) + initial;
  return decay(step - warmup_steps, warmup_target);
}

double piecewise(const Attrs& a, int64_t step) {
  const auto& b = attr_ints(kOp, a, "boundaries");
  const auto& v = attr_floats(kOp, a, "values");
  for (size_t i = 0; i < b.size(); ++i)
    if (step <= b[i]) return v[i];
  return v.back();
}

// keras.optimizers.schedules.PolynomialDecay.__call__.
double polynomial(const Attrs& a, double step) {
  double decay_steps = double(attr_i(kOp, a, "decay_steps"));
  if (attr_b(kOp, a, "cycle")) {
    decay_steps *= step == 0 ? 1.0 : std::ceil(step / decay_steps);
  } else {
    step = std::min(step, decay_steps);
  }
  double initial = attr_f(kOp, a, "initial_learning_rate");
  double end = attr_f(kOp, a, "end_learning_rate");
  return (initial - end) * std::pow(1.0 - step / decay_steps, attr_f(kOp, a, "power")) + end;
}

// keras.optimizers.schedules.InverseTimeDecay.__call__.
double inverse_time(const Attrs& a, double step) {
  double p = step / double(attr_i(kOp, a, "decay_steps"));
  if (attr_b(kOp, a, "staircase")) p = std::floor(p);
  return attr_f(kOp, a, "initial_learning_rate") / (1.0 + attr_f(kOp, a, "decay_rate") * p);
}

// keras.optimizers.schedules.CosineDecayRestarts.__call__ (SGDR).
double cosine_restarts(const Attrs& a, double step) {
  double t_mul = attr_f(kOp, a, "t_mul"), m_mul = attr_f(kOp, a, "m_mul");
  double alpha = attr_f(kOp, a, "alpha");
  double fraction = step / double(attr_i(kOp, a, "first_decay_steps"));
  double restart;
  if (t_mul == 1.0) {
    restart = std::floor(fraction);
    fraction -= restart;
  } else {
    restart = std::floor(std::log(1.0 - fraction * (1.0 - t_mul)) / std::log(t_mul));
    double periods_done = (1.0 - std::pow(t_mul, restart)) / (1.0 - t_mul);
    fraction = (fraction - periods_done) / std::pow(t_mul, restart);
  }
  double cosine_decayed = 0.5 * std::pow(m_mul, restart) * (1.0 + std::cos(M_PI * fraction));
  return attr_f(kOp, a, "initial_learning_rate") * ((1.0 - alpha) * cosine_decayed + alpha);
}

}  // namespace

double evaluate_schedule(const Attrs& attrs, int64_t step) {
  const std::string& kind = attr_s(kOp, attrs, "kind");
  if (kind == "constant") return attr_f(kOp, attrs, "value");
  if (kind == "exponential_decay") return exponential(attrs, double(step));
  if (kind == "cosine_decay") return cosine(attrs, double(step));
  if (kind == "piecewise_constant_decay") return piecewise(attrs, step);
  if (kind == "polynomial_decay") return polynomial(attrs, double(step));
  if (kind == "inverse_time_decay") return inverse_time(attrs, double(step));
  if (kind == "cosine_decay_restarts") return cosine_restarts(attrs, double(step));
  LS_FAIL("unknown learning-rate schedule '", kind, "'");
}

std::function<double(int64_t)> compile_schedule(const Attrs& attrs) {
  const std::string kind = attr_s(kOp, attrs, "kind");
  if (kind == "constant") {
    const double value = attr_f(kOp, attrs, "value");
    return [value](int64_t) { return value; };
  }
  LS_CHECK(kind == "exponential_decay" || kind == "cosine_decay" ||
               kind == "piecewise_constant_decay" || kind == "polynomial_decay" ||
               kind == "inverse_time_decay" || kind == "cosine_decay_restarts",
           "unknown learning-rate schedule '", kind, "'");
  // The others read their defaults once: a copy of the attrs with every declared one set.
  Attrs full = attrs;
  for (const AttrDecl& d : OpRegistry::get().op(kOp).attrs)
    if (!full.has(d.name) && d.default_value) full.set(d.name, *d.default_value);
  evaluate_schedule(full, 0);  // validates now, not on the first step
  return [full](int64_t step) { return evaluate_schedule(full, step); };
}

}  // namespace lockstep::ops
