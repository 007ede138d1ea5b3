// The cpu backend (lockstep/graph/backend.h): oneDNN convolutions and matmuls, OpenMP loops for
// the rest, run node by node by the kernel program. Its passes: the op fusions its kernels take,
// the 1x1 + depthwise conv pairs oneDNN fuses (conv_chain.h), then oneDNN's blocked layouts
// (LOCKSTEP_LAYOUTS=0 keeps every tensor NHWC, for A/B profiling).
#include "backends/cpu/conv_chain.h"
#include "backends/cpu/layouts.h"
#include "graph/internal/kernel_program.h"
#include "lockstep/core/config.h"
#include "lockstep/core/env.h"
#include "lockstep/graph/executable.h"
#include "ops/internal/fusions.h"

namespace lockstep::cpu {

namespace {

class CpuBackend final : public KernelBackend {
 public:
  std::string name() const override { return "cpu"; }
  std::string doc() const override {
    return "oneDNN convolutions and matmuls, OpenMP-parallel loops for the rest";
  }
  bool splits_batch_over_host_threads() const override { return true; }
  bool can_run(const Node& n, const std::vector<TensorType>&, std::string* why) const override {
    const OpRegistry& registry = OpRegistry::get();
    if (registry.kernel(n.op, "cpu")) return true;
    if (why) {
      const std::string& declared = registry.op(n.op).reference_only;
      *why = declared.empty() ? "no 'cpu' kernel, and the op is not declared reference-only"
                              : declared;
    }
    return false;
  }
  void run_passes(Graph& g, std::vector<Value>& outputs,
                  std::vector<std::string>& report) const override {
    ops::fuse_for_kernels(g, outputs, report);
    fuse_pointwise_depthwise(g, outputs, report);
    if (env::flag(env::layouts)) plan_layouts(g, outputs, report);
  }
};

}  // namespace

LOCKSTEP_REGISTER(cpu_backend) { register_backend(std::make_shared<CpuBackend>()); }

}  // namespace lockstep::cpu
