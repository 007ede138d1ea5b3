// Learning-rate schedule formulas keyed by lr_schedule attrs {"kind": ..., params}; shared by
// the lr_schedule kernels (backends) and lockstep/train/schedule.h's schedule objects.
#pragma once
#include <cstdint>

#include "lockstep/graph/attrs.h"

namespace lockstep::ops {

// The learning rate at `step` of the schedule described by attrs; throws on an unknown kind.
double evaluate_schedule(const Attrs& attrs, int64_t step);

}  // namespace lockstep::ops
