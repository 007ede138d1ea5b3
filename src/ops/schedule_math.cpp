// The learning-rate schedule formulas (Keras 3 semantics), keyed by the attrs of the
// "lr_schedule" op: one definition used by the op's kernels and by train's schedule objects.
#include "ops/internal/schedule_math.h"

#include <algorithm>
#include <cmath>

namespace lockstep::ops {

namespace {

double exponential(const Attrs& a, double step) {
  double p = step / double(a.i("decay_steps"));
  if (a.b("staircase", false)) p = std::floor(p);
  return a.f("initial_learning_rate") * std::pow(a.f("decay_rate"), p);
}

// keras.optimizers.schedules.CosineDecay.__call__ (warmup_target < 0 means None).
double cosine(const Attrs& a, double step) {
  double initial = a.f("initial_learning_rate");
  double decay_steps = double(a.i("decay_steps"));
  double alpha = a.f("alpha", 0.0);
  double warmup_target = a.f("warmup_target", -1.0);
  double warmup_steps = double(a.i("warmup_steps", 0));
  auto decay = [&](double s, double from) {
    double frac = s / decay_steps;
    double cosine_decayed = 0.5 * (1.0 + std::cos(M_PI * frac));
    return from * ((1.0 - alpha) * cosine_decayed + alpha);
  };
  if (warmup_target < 0) return decay(std::min(step, decay_steps), initial);
  step = std::min(step, decay_steps + warmup_steps);
  if (step < warmup_steps)
    return (warmup_target - initial) * (step / warmup_steps) + initial;
  return decay(step - warmup_steps, warmup_target);
}

double piecewise(const Attrs& a, int64_t step) {
  const auto& b = a.ints("boundaries");
  const auto& v = a.floats("values");
  for (size_t i = 0; i < b.size(); ++i)
    if (step <= b[i]) return v[i];
  return v.back();
}

}  // namespace

double evaluate_schedule(const Attrs& attrs, int64_t step) {
  const std::string& kind = attrs.s("kind");
  if (kind == "constant") return attrs.f("value");
  if (kind == "exponential_decay") return exponential(attrs, double(step));
  if (kind == "cosine_decay") return cosine(attrs, double(step));
  if (kind == "piecewise_constant_decay") return piecewise(attrs, step);
  LS_FAIL("unknown learning-rate schedule '", kind, "'");
}

}  // namespace lockstep::ops
