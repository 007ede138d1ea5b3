// Helpers for kernel factories: wrap a run-time lambda (with state captured at compile time).
#pragma once
#include <memory>
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

inline const float* in_f(const KernelArgs& a, int i) { return a.in(i).data<float>(); }
inline float* out_f(const KernelArgs& a, int i) { return a.out(i).data<float>(); }

}  // namespace lockstep
