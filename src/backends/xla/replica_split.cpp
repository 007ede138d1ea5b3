// See replica_split.h.
#include "backends/xla/replica_split.h"

#include "lockstep/core/error.h"

namespace lockstep::xla {

std::vector<std::vector<Tensor>> split_batch(const std::vector<Tensor>& inputs, int num_replicas) {
  LS_CHECK(num_replicas >= 1, "xla: the replica count must be >= 1, got ", num_replicas);
  LS_CHECK(!inputs.empty(), "xla: a step needs at least one input to split across replicas");
  const int64_t rows = inputs[0].shape().rank() ? inputs[0].dim(0) : 0;
  for (size_t i = 0; i < inputs.size(); ++i)
    LS_CHECK(inputs[i].shape().rank() >= 1 && inputs[i].dim(0) == rows, "xla: input ", i,
             " of the step has shape ", inputs[i].shape().str(), ", input 0 has ", rows,
             " rows: every input needs the batch's rows as its first dim");
  const int64_t r = num_replicas;
  const int64_t below = rows / r * r, above = below + r;
  LS_CHECK(rows % r == 0, "xla: a batch of ", rows, " rows does not divide among ", r,
           " replicas (one per device); use a batch size that is a multiple of ", r, " (",
           below > 0 ? std::to_string(below) + " or " : "", above,
           "), or batch the dataset with drop_remainder so the last batch is full too");
  std::vector<std::vector<Tensor>> out(static_cast<size_t>(r));
  const int64_t share = rows / r;
  for (int64_t k = 0; k < r; ++k)
    for (const Tensor& t : inputs) out[size_t(k)].push_back(t.slice(k * share, (k + 1) * share));
  return out;
}

}  // namespace lockstep::xla
