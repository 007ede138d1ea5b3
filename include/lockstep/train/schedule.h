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
}  // namespace schedules

}  // namespace lockstep
