// Helpers for kernel factories: wrap a run-time lambda (with state captured at compile time),
// and hand a node to the reference kernel, saying why.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "lockstep/graph/op_registry.h"

namespace lockstep {

template <typename F>
struct LambdaKernel final : Kernel {
  F f;
  size_t ws;
  LambdaKernel(F fn, size_t w) : f(std::move(fn)), ws(w) {}
  size_t workspace_bytes() const override { return ws; }
  void run(const KernelArgs& a) override { f(a); }
};

// A kernel whose run() calls f(args); ws bytes of workspace.
template <typename F>
std::unique_ptr<Kernel> make_kernel(F f, size_t ws = 0) {
  return std::make_unique<LambdaKernel<F>>(std::move(f), ws);
}

// The reference kernel, run for shapes a backend's own kernel does not cover; reports `reason`.
class ReferenceFallback final : public Kernel {
 public:
  ReferenceFallback(std::unique_ptr<Kernel> k, std::string reason)
      : kernel_(std::move(k)), reason_(std::move(reason)) {}
  size_t workspace_bytes() const override { return kernel_->workspace_bytes(); }
  void run(const KernelArgs& a) override { kernel_->run(a); }
  std::string fallback_reason() const override { return reason_; }

 private:
  std::unique_ptr<Kernel> kernel_;
  std::string reason_;
};

// Builds the reference kernel of node n for a backend factory that does not cover these shapes;
// the executable reports `reason` (and strict mode refuses it).
inline std::unique_ptr<Kernel> reference_fallback(const Node& n, const std::vector<TensorType>& in,
                                                  std::string reason) {
  const KernelFactory* f = OpRegistry::get().kernel(n.op, kReferenceBackend);
  LS_CHECK(f, "no reference kernel for '", n.op, "'");
  return std::make_unique<ReferenceFallback>((*f)(n, in), std::move(reason));
}

inline const float* in_f(const KernelArgs& a, int i) { return a.in(i).data<float>(); }
inline float* out_f(const KernelArgs& a, int i) { return a.out(i).data<float>(); }

}  // namespace lockstep
