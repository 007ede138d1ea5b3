// The lowering of lr_schedule: the Keras learning-rate schedules of
// src/ops/schedule_math.cpp as scalar float32 arithmetic on the step (the optimizer's
// iterations variable, rounded half away from zero as the kernel's llround), so the learning
// rate is computed inside the compiled step. The reference evaluates in double; float32 here
// agrees to ~1e-6 relative.
#include <cmath>

#include "backends/xla/lowering.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep::xla {

namespace {

// Scalar float32 arithmetic with the constants written as numbers.
struct Scalars {
  StablehloBuilder& b;
  HloValue c(double v) { return b.scalar(ElemType::f32, v); }
  HloValue add(const HloValue& x, const HloValue& y) { return b.add(x, y); }
  HloValue sub(const HloValue& x, const HloValue& y) { return b.subtract(x, y); }
  HloValue mul(const HloValue& x, const HloValue& y) { return b.multiply(x, y); }
  HloValue div(const HloValue& x, const HloValue& y) { return b.divide(x, y); }
  HloValue pow(const HloValue& x, const HloValue& y) { return b.power(x, y); }
  HloValue min(const HloValue& x, const HloValue& y) { return b.minimum(x, y); }
  HloValue less(const HloValue& x, const HloValue& y) { return b.compare(x, y, Compare::LT); }
  HloValue pick(const HloValue& p, const HloValue& x, const HloValue& y) {
    return b.select(p, x, y);
  }
};

double f(const Node& n, const char* key) { return attr_f(n, key); }
double i(const Node& n, const char* key) { return double(attr_i(n, key)); }

HloValue exponential(Scalars& s, const Node& n, const HloValue& step) {
  HloValue p = s.div(step, s.c(i(n, "decay_steps")));
  if (attr_b(n, "staircase")) p = s.b.floor(p);
  return s.mul(s.c(f(n, "initial_learning_rate")), s.pow(s.c(f(n, "decay_rate")), p));
}

HloValue inverse_time(Scalars& s, const Node& n, const HloValue& step) {
  HloValue p = s.div(step, s.c(i(n, "decay_steps")));
  if (attr_b(n, "staircase")) p = s.b.floor(p);
  return s.div(s.c(f(n, "initial_learning_rate")),
               s.add(s.c(1), s.mul(s.c(f(n, "decay_rate")), p)));
}

// from * ((1 - alpha) * 0.5 (1 + cos(pi step / decay_steps)) + alpha)
HloValue cosine_decay(Scalars& s, const HloValue& step, double decay_steps, double alpha,
                      const HloValue& from) {
  HloValue cosine = s.b.cosine(s.mul(s.c(M_PI), s.div(step, s.c(decay_steps))));
  HloValue decayed = s.mul(s.c(0.5), s.add(s.c(1), cosine));
  return s.mul(from, s.add(s.mul(s.c(1 - alpha), decayed), s.c(alpha)));
}

HloValue cosine(Scalars& s, const Node& n, const HloValue& step) {
  const double initial = f(n, "initial_learning_rate"), decay_steps = i(n, "decay_steps");
  const double alpha = f(n, "alpha"), target = f(n, "warmup_target");
  const double warmup = i(n, "warmup_steps");
  if (target < 0)
    return cosine_decay(s, s.min(step, s.c(decay_steps)), decay_steps, alpha, s.c(initial));
  HloValue st = s.min(step, s.c(decay_steps + warmup));
  HloValue ramp = s.add(s.mul(s.c(target - initial), s.div(st, s.c(warmup))), s.c(initial));
  HloValue after = cosine_decay(s, s.sub(st, s.c(warmup)), decay_steps, alpha, s.c(target));
  return s.pick(s.less(st, s.c(warmup)), ramp, after);
}

HloValue piecewise(Scalars& s, const Node& n, const HloValue& step) {
  const auto& bounds = attr_ints(n, "boundaries");
  const auto& values = attr_floats(n, "values");
  HloValue r = s.c(values.back());
  for (size_t k = bounds.size(); k-- > 0;)  // step <= bounds[k] ? values[k] : (the later ones)
    r = s.pick(s.b.compare(step, s.c(double(bounds[k])), Compare::LE), s.c(values[k]), r);
  return r;
}

HloValue polynomial(Scalars& s, const Node& n, const HloValue& step_in) {
  const double decay = i(n, "decay_steps");
  HloValue step = step_in, steps = s.c(decay);
  if (attr_b(n, "cycle")) {
    HloValue periods = s.b.ceil(s.div(step, s.c(decay)));
    periods = s.pick(s.b.compare(step, s.c(0), Compare::EQ), s.c(1), periods);
    steps = s.mul(steps, periods);
  } else {
    step = s.min(step, steps);
  }
  const double initial = f(n, "initial_learning_rate"), end = f(n, "end_learning_rate");
  HloValue frac = s.pow(s.sub(s.c(1), s.div(step, steps)), s.c(f(n, "power")));
  return s.add(s.mul(s.c(initial - end), frac), s.c(end));
}

HloValue cosine_restarts(Scalars& s, const Node& n, const HloValue& step) {
  const double t_mul = f(n, "t_mul"), m_mul = f(n, "m_mul"), alpha = f(n, "alpha");
  HloValue fraction = s.div(step, s.c(i(n, "first_decay_steps")));
  HloValue restart;
  if (t_mul == 1.0) {
    restart = s.b.floor(fraction);
    fraction = s.sub(fraction, restart);
  } else {
    HloValue ratio =
        s.div(s.b.log(s.sub(s.c(1), s.mul(fraction, s.c(1 - t_mul)))), s.c(std::log(t_mul)));
    restart = s.b.floor(ratio);
    HloValue grown = s.pow(s.c(t_mul), restart);
    HloValue done = s.div(s.sub(s.c(1), grown), s.c(1 - t_mul));
    fraction = s.div(s.sub(fraction, done), grown);
  }
  HloValue wave = s.add(s.c(1), s.b.cosine(s.mul(s.c(M_PI), fraction)));
  HloValue decayed = s.mul(s.mul(s.c(0.5), s.pow(s.c(m_mul), restart)), wave);
  return s.mul(s.c(f(n, "initial_learning_rate")),
               s.add(s.mul(s.c(1 - alpha), decayed), s.c(alpha)));
}

std::vector<HloValue> lr_schedule(LoweringContext& cx, const Node& n) {
  Scalars s{cx.b};
  HloValue step = cx.b.round_nearest_afz(cx.b.reshape(cx.in(n, 0), {}));
  const std::string& kind = attr_s(n, "kind");
  HloValue lr;
  if (kind == "constant")
    lr = s.c(f(n, "value"));
  else if (kind == "exponential_decay")
    lr = exponential(s, n, step);
  else if (kind == "cosine_decay")
    lr = cosine(s, n, step);
  else if (kind == "piecewise_constant_decay")
    lr = piecewise(s, n, step);
  else if (kind == "polynomial_decay")
    lr = polynomial(s, n, step);
  else if (kind == "inverse_time_decay")
    lr = inverse_time(s, n, step);
  else if (kind == "cosine_decay_restarts")
    lr = cosine_restarts(s, n, step);
  else
    LS_FAIL("unknown learning-rate schedule '", kind, "'");
  return {lr};
}

}  // namespace

LOCKSTEP_REGISTER(xla_schedule_lowerings) { register_lowering(op::lr_schedule, lr_schedule); }

}  // namespace lockstep::xla
