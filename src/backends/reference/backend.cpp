// The reference backend (lockstep/graph/backend.h): readable serial loops, the oracle of every
// test and the kernel every other host backend falls back to. Its passes: the op fusions (its
// kernels implement the fused forms too, so compiled reference programs test them).
#include "graph/internal/kernel_program.h"
#include "lockstep/graph/backends.h"
#include "lockstep/graph/executable.h"
#include "ops/internal/fusions.h"

namespace lockstep {

namespace {

class ReferenceBackend final : public KernelBackend {
 public:
  std::string name() const override { return kReferenceBackend; }
  std::string doc() const override {
    return "readable serial loops: the oracle of every test and the fallback";
  }
  bool splits_batch_over_host_threads() const override { return false; }
  bool can_run(const Node& n, const std::vector<TensorType>&, std::string* why) const override {
    if (OpRegistry::get().kernel(n.op, kReferenceBackend)) return true;
    if (why) *why = "no reference kernel is registered for the op";
    return false;
  }
  void run_passes(Graph& g, std::vector<Value>& outputs,
                  std::vector<std::string>& report) const override {
    ops::fuse_for_kernels(g, outputs, report);
  }
};

}  // namespace

LOCKSTEP_REGISTER(reference_backend) { register_backend(std::make_shared<ReferenceBackend>()); }

}  // namespace lockstep
