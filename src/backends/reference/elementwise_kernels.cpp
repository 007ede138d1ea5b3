// Reference kernels for elementwise ops: broadcasting binaries, unary math and activation grads.
#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";

template <class F>
void binary_kernel(const KernelArgs& a, F f) {
  const float* x = a.in(0).data<float>();
  const float* y = a.in(1).data<float>();
  float* out = a.out(0).data<float>();
  ew::broadcast_loop(a.out(0).shape(), a.in(0).shape(), a.in(1).shape(),
                     [&](int64_t i, int64_t ia, int64_t ib) { out[i] = f(x[ia], y[ib]); });
}

// (dy, a, b) -> (da, db) at dy's shape; `pick_a(a, b)` says a was selected; ties split.
template <class F>
void minmax_grad_kernel(const KernelArgs& k, F pick_a) {
  const float* dy = k.in(0).data<float>();
  const float* a = k.in(1).data<float>();
  const float* b = k.in(2).data<float>();
  float* da = k.out(0).data<float>();
  float* db = k.out(1).data<float>();
  ew::broadcast_loop(k.out(0).shape(), k.in(1).shape(), k.in(2).shape(),
                     [&](int64_t i, int64_t ia, int64_t ib) {
                       float x = a[ia], y = b[ib];
                       if (x == y)
                         da[i] = db[i] = 0.5f * dy[i];
                       else if (pick_a(x, y))
                         da[i] = dy[i], db[i] = 0.f;
                       else
                         da[i] = 0.f, db[i] = dy[i];
                     });
}

}  // namespace

LOCKSTEP_REGISTER(reference_elementwise_kernels) {
  auto& R = OpRegistry::get();
  ew::binary_ops([&](OpId op, auto f) {
    R.add_kernel(op, kRef,
                 simple_kernel([f](const Node&, const KernelArgs& a) { binary_kernel(a, f); }));
  });
  ew::unary_ops([&](OpId op, auto make) {
    R.add_kernel(op, kRef, [make](const Node& n, const std::vector<TensorType>&) {
      return make_kernel([f = make(n)](const KernelArgs& a) {
        const float* x = a.in(0).data<float>();
        float* y = a.out(0).data<float>();
        for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) y[i] = f(x[i]);
      });
    });
  });
  ew::unary_grad_ops([&](OpId op, auto make) {
    R.add_kernel(op, kRef, [make](const Node& n, const std::vector<TensorType>&) {
      return make_kernel([f = make(n)](const KernelArgs& a) {
        const float* dy = a.in(0).data<float>();
        const float* v = a.in(1).data<float>();
        float* dx = a.out(0).data<float>();
        for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) dx[i] = f(dy[i], v[i]);
      });
    });
  });
  R.add_kernel(op::maximum_grad, kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 minmax_grad_kernel(a, [](float x, float y) { return x > y; });
               }));
  R.add_kernel(op::minimum_grad, kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 minmax_grad_kernel(a, [](float x, float y) { return x < y; });
               }));
}

}  // namespace lockstep
