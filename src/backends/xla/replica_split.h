// The batch of one step split across the replicas of an xla program (one per PJRT device, the
// TPUStrategy way): replica r gets rows [r * n / R, (r + 1) * n / R) of every input. A batch
// whose rows do not divide among the replicas is an error that says what to do.
#pragma once
#include <vector>

#include "lockstep/core/tensor.h"

namespace lockstep::xla {

// inputs: one step's host tensors, each with the batch as dim 0 (all the same size). Returns
// one input list per replica (views of the rows, no copy).
std::vector<std::vector<Tensor>> split_batch(const std::vector<Tensor>& inputs, int num_replicas);

}  // namespace lockstep::xla
