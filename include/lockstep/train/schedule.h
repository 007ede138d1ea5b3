// Learning-rate schedules (Keras). Each is a pure function of the step, serialised into the
// attrs of one "lr_schedule" op so the compiled step computes its own learning rate.
#pragma once
#include <memory>
#include <vector>

#include "lockstep/graph/attrs.h"

namespace lockstep {

class LearningRateSchedule {
 public:
  virtual ~LearningRateSchedule() = default;
  virtual double operator()(int64_t step) const = 0;
  virtual Attrs attrs() const = 0;  // {"kind": ..., params}
};
using SchedulePtr = std::shared_ptr<LearningRateSchedule>;

namespace schedules {
SchedulePtr Constant(double lr);
SchedulePtr ExponentialDecay(double initial_learning_rate, int64_t decay_steps, double decay_rate,
                             bool staircase = false);
// Keras CosineDecay: optional linear warmup from initial_learning_rate to warmup_target over
// warmup_steps, then cosine decay over decay_steps down to alpha * peak.
SchedulePtr CosineDecay(double initial_learning_rate, int64_t decay_steps, double alpha = 0.0,
                        double warmup_target = -1, int64_t warmup_steps = 0);
SchedulePtr PiecewiseConstantDecay(std::vector<int64_t> boundaries, std::vector<double> values);
// Keras PolynomialDecay: (initial - end) * (1 - min(step, decay_steps) / decay_steps)^power + end;
// with cycle, decay_steps grows to the next multiple of itself past step instead.
SchedulePtr PolynomialDecay(double initial_learning_rate, int64_t decay_steps,
                            double end_learning_rate = 0.0001, double power = 1.0,
                            bool cycle = false);
// Keras InverseTimeDecay: initial / (1 + decay_rate * step / decay_steps) (floor of the
// fraction with staircase).
SchedulePtr InverseTimeDecay(double initial_learning_rate, int64_t decay_steps, double decay_rate,
                             bool staircase = false);
// Keras CosineDecayRestarts (SGDR): cosine decay over first_decay_steps, then restarts with
// periods t_mul times longer and peaks m_mul times lower; alpha is the floor as a fraction.
SchedulePtr CosineDecayRestarts(double initial_learning_rate, int64_t first_decay_steps,
                                double t_mul = 2.0, double m_mul = 1.0, double alpha = 0.0);
}  // namespace schedules

}  // namespace lockstep
