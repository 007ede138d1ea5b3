// Learning-rate schedules (Keras). Each is a pure function of the step, serialised into the
// attrs of one "lr_schedule" op so the compiled step computes its own learning rate.
#pragma once
#include <memory>
#include <vector>

#include "lockstep/graph/attrs.h"

namespace lockstep {

/// A learning rate as a function of the optimizer's step
/// (keras.optimizers.schedules.LearningRateSchedule).
class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  virtual double operator()(int64_t step) const = 0;  ///< the rate at `step` (from 0)
  virtual Attrs attrs() const = 0;                    ///< {"kind": ..., params}
};
/// A shared schedule (OptimizerOptions::schedule).
using SchedulePtr = std::shared_ptr<LearningRateSchedule>;

namespace schedules {
/// The same rate at every step.
SchedulePtr Constant(double lr);
/// Keras ExponentialDecay: initial * decay_rate^(step / decay_steps) (the exponent floored
/// with staircase).
SchedulePtr ExponentialDecay(double initial_learning_rate, int64_t decay_steps, double decay_rate,
                             bool staircase = false);
/// Keras CosineDecay: optional linear warmup from initial_learning_rate to warmup_target over
/// warmup_steps, then cosine decay over decay_steps down to alpha * peak.
SchedulePtr CosineDecay(double initial_learning_rate, int64_t decay_steps, double alpha = 0.0,
                        double warmup_target = -1, int64_t warmup_steps = 0);
/// Keras PiecewiseConstantDecay: values[i] while step <= boundaries[i] (one more value than
/// boundaries).
SchedulePtr PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<double> values);
/// Keras PolynomialDecay: (initial - end) * (1 - min(step, decay_steps) / decay_steps)^power + end;
/// with cycle, decay_steps grows to the next multiple of itself past step instead.
SchedulePtr PolynomialDecay(double initial_learning_rate, int64_t decay_steps,
                            double end_learning_rate = 0.0001, double power = 1.0,
                            bool cycle = false);
/// Keras InverseTimeDecay: initial / (1 + decay_rate * step / decay_steps) (floor of the
/// fraction with staircase).
SchedulePtr InverseTimeDecay(double initial_learning_rate, int64_t decay_steps, double decay_rate,
                             bool staircase = false);
/// Keras CosineDecayRestarts (SGDR): cosine decay over first_decay_steps, then restarts with
/// periods t_mul times longer and peaks m_mul times lower; alpha is the floor as a fraction.
SchedulePtr CosineDecayRestarts(double initial_learning_rate, int64_t first_decay_steps,
                                double t_mul = 2.0, double m_mul = 1.0, double alpha = 0.0);
}  // namespace schedules

}  // namespace lockstep
