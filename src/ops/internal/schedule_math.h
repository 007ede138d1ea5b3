// Learning-rate schedule formulas keyed by lr_schedule attrs {"kind": ..., params}; shared by
// the lr_schedule kernels (backends) and lockstep/optimizers/schedule.h's schedule objects.
#pragma once
#include <cstdint>
#include <functional>

#include "lockstep/graph/attrs.h"

namespace lockstep::ops {

// The learning rate at `step` of the schedule described by attrs; throws on an unknown kind.
// Defaults come from the lr_schedule op's declaration.
double evaluate_schedule(const Attrs& attrs, int64_t step);

// The same as a function of the step, with the attributes read once (the lr_schedule kernels).
std::function<double(int64_t)> compile_schedule(const Attrs& attrs);

}  // namespace lockstep::ops
