// The program of a kernel backend (reference, cpu): the graph's nodes scheduled once, every
// intermediate value given an offset in one arena (plan_memory), each node's kernel built once
// from the registry; run() then calls the kernels in order with no heap allocation. Eager
// programs (CompileOptions::eager) run op by op with fresh buffers instead (the debugging path
// and a test oracle). Graph's declared internal interface: the kernel backends' compile().
#pragma once
#include <memory>
#include <vector>

#include "lockstep/graph/backend.h"

namespace lockstep {

// A node of `backend` without a kernel of its own runs the reference kernel: reported, or
// refused when options.strict_kernels (or LOCKSTEP_STRICT_KERNELS) is on.
std::unique_ptr<CompiledGraph> compile_kernel_program(Graph g, std::vector<Value> inputs,
                                                      std::vector<Value> outputs,
                                                      const CompileOptions& options,
                                                      const StepInfo* step, const Backend& backend);

// A backend whose programs are kernel programs (reference, cpu): it says what it can run and
// which passes it runs; compile() is the kernel program's.
class KernelBackend : public Backend {
 public:
  std::unique_ptr<CompiledGraph> compile(Graph g, std::vector<Value> inputs,
                                         std::vector<Value> outputs, const CompileOptions& options,
                                         const StepInfo* step) const override {
    return compile_kernel_program(std::move(g), std::move(inputs), std::move(outputs), options,
                                  step, *this);
  }
};

}  // namespace lockstep
