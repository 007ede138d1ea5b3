// Helpers for kernel factories: wrap a run-time lambda (with state captured at compile time),
// and hand a node to the reference kernel, saying why.
#pragma once
#include <memory>
#include <string>
#include <utility>

#include "lockstep/graph/op_registry.h"

namespace lockstep {

// Mixed-precision element access for kernels templated on their storage type T (float or
// bf16): ld() widens to f32, st<T>() rounds back. Arithmetic stays in f32.
inline float ld(float v) { return v; }
inline float ld(bf16 v) { return bf16_to_f32(v); }
template <class T>
inline T st(float v);
template <>
inline float st<float>(float v) {
  return v;
}
template <>
inline bf16 st<bf16>(float v) {
  return f32_to_bf16(v);
}

// The float types of a node's inputs and outputs: all f32, all bf16 (ignoring integer
// tensors), or a mix (which a templated kernel hands to bf16_via_f32).
enum class FloatKind { f32, bf16, mixed };
inline FloatKind float_kind(const Node& n, const std::vector<TensorType>& in) {
  bool f32 = false, b16 = false;
  auto see = [&](DType t) {
    (t == DType::f32 ? f32 : b16) |= (t == DType::f32 || t == DType::bf16);
  };
  for (const TensorType& t : in) see(t.dtype);
  for (const TensorType& t : n.outputs) see(t.dtype);
  return b16 ? (f32 ? FloatKind::mixed : FloatKind::bf16) : FloatKind::f32;
}

// make(float{}) or make(bf16{}) by the node's float kind; a mix runs `self` between
// conversions.
template <class Make>
std::unique_ptr<Kernel> by_float_kind(const Node& n, const std::vector<TensorType>& in,
                                      const KernelFactory& self, Make make) {
  switch (float_kind(n, in)) {
    case FloatKind::f32:
      return make(float{});
    case FloatKind::bf16:
      return make(bf16{});
    default:
      return bf16_via_f32(n, in, self);
  }
}

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
  const bool bf16 = float_kind(n, in) != FloatKind::f32 &&
                    !OpRegistry::get().kernel_takes_bf16(n.op, kReferenceBackend);
  return std::make_unique<ReferenceFallback>(bf16 ? bf16_via_f32(n, in, *f) : (*f)(n, in),
                                             std::move(reason));
}

inline const float* in_f(const KernelArgs& a, int i) { return a.in(i).data<float>(); }
inline float* out_f(const KernelArgs& a, int i) { return a.out(i).data<float>(); }

}  // namespace lockstep
