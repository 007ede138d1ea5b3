// Reference kernels for reductions, broadcast_to, bias_add and softmax/log_softmax (+ grads).
#include <cstring>
#include <memory>
#include <vector>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";

// Reduction kernels: the kept shape is worked out once; per-output scratch (double sums, tie
// counts) lives in the workspace, so run() does not allocate.
struct ReduceKernel : Kernel {
  enum Kind { sum, mean, max, sum_grad, mean_grad, max_grad } kind;
  Shape x, keep;
  int64_t m = 0;  // number of output elements
  ReduceKernel(Kind k, const Node& n, const Shape& xs) : kind(k), x(xs) {
    keep = ew::keep_shape(x, ew::reduce_axes(n, x.rank()));
    m = keep.numel();
  }
  size_t workspace_bytes() const override { return size_t(m) * sizeof(double); }
  // f(i_x, i_out) for each element of x.
  template <class F>
  void each(F f) const {
    ew::broadcast_loop(x, keep, keep, [&](int64_t i, int64_t o, int64_t) { f(i, o); });
  }
  void run(const KernelArgs& a) override {
    double* acc = static_cast<double*>(a.workspace);
    const double count = m ? double(x.numel()) / double(m) : 1.0;
    switch (kind) {
      case sum:
      case mean: {
        const float* xs = a.in(0).data<float>();
        float* y = a.out(0).data<float>();
        for (int64_t o = 0; o < m; ++o) acc[o] = 0;
        each([&](int64_t i, int64_t o) { acc[o] += xs[i]; });
        for (int64_t o = 0; o < m; ++o) y[o] = float(kind == mean ? acc[o] / count : acc[o]);
        break;
      }
      case max: {
        const float* xs = a.in(0).data<float>();
        float* y = a.out(0).data<float>();
        for (int64_t o = 0; o < m; ++o) y[o] = -std::numeric_limits<float>::infinity();
        each([&](int64_t i, int64_t o) { y[o] = std::max(y[o], xs[i]); });
        break;
      }
      case sum_grad:
      case mean_grad: {
        const float* dy = a.in(0).data<float>();
        float* dx = a.out(0).data<float>();
        const float scale = kind == mean_grad ? float(1.0 / count) : 1.f;
        each([&](int64_t i, int64_t o) { dx[i] = dy[o] * scale; });
        break;
      }
      case max_grad: {  // dy goes to the maxima, split evenly between ties
        const float* dy = a.in(0).data<float>();
        const float* xs = a.in(1).data<float>();
        const float* y = a.in(2).data<float>();
        float* dx = a.out(0).data<float>();
        for (int64_t o = 0; o < m; ++o) acc[o] = 0;
        each([&](int64_t i, int64_t o) { acc[o] += xs[i] == y[o] ? 1.0 : 0.0; });
        each([&](int64_t i, int64_t o) { dx[i] = xs[i] == y[o] ? dy[o] / float(acc[o]) : 0.f; });
        break;
      }
    }
  }
};

KernelFactory reduce_factory(ReduceKernel::Kind k, int x_input) {
  return [k, x_input](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    return std::make_unique<ReduceKernel>(k, n, in[x_input].shape);
  };
}

// Splits a tensor around `axis` into outer x C x inner.
void split_axis(const Shape& s, int64_t axis, int64_t& outer, int64_t& C, int64_t& inner) {
  if (axis < 0) axis += s.rank();
  outer = inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  C = s[int(axis)];
  for (int i = int(axis) + 1; i < s.rank(); ++i) inner *= s[i];
}

// softmax / log_softmax along attr axis: `row` on each of the outer x inner rows of C.
template <class F>
KernelFactory softmax_factory(F row) {
  return [row](const Node& n, const std::vector<TensorType>& in) {
    int64_t outer, C, inner;
    split_axis(in[0].shape, attr_i(n, "axis"), outer, C, inner);
    return make_kernel([row, outer, C, inner](const KernelArgs& a) {
      const float* x = a.in(0).data<float>();
      float* y = a.out(0).data<float>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i)
          row(x + o * C * inner + i, y + o * C * inner + i, C, inner);
    });
  };
}

// Their gradients (dy, y) -> dx.
template <class F>
KernelFactory softmax_grad_factory(F row) {
  return [row](const Node& n, const std::vector<TensorType>& in) {
    int64_t outer, C, inner;
    split_axis(in[0].shape, attr_i(n, "axis"), outer, C, inner);
    return make_kernel([row, outer, C, inner](const KernelArgs& a) {
      const float* dy = a.in(0).data<float>();
      const float* y = a.in(1).data<float>();
      float* dx = a.out(0).data<float>();
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t off = o * C * inner + i;
          row(dy + off, y + off, dx + off, C, inner);
        }
    });
  };
}

}  // namespace

LOCKSTEP_REGISTER(reference_reduce_kernels) {
  auto& R = OpRegistry::get();
  using RK = ReduceKernel;
  R.add_kernel(op::reduce_sum, kRef, reduce_factory(RK::sum, 0));
  R.add_kernel(op::reduce_mean, kRef, reduce_factory(RK::mean, 0));
  R.add_kernel(op::reduce_max, kRef, reduce_factory(RK::max, 0));
  R.add_kernel(op::reduce_sum_grad, kRef, reduce_factory(RK::sum_grad, 1));
  R.add_kernel(op::reduce_mean_grad, kRef, reduce_factory(RK::mean_grad, 1));
  R.add_kernel(op::reduce_max_grad, kRef, reduce_factory(RK::max_grad, 1));
  R.add_kernel(op::broadcast_to, kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 size_t es = dtype_size(a.in(0).dtype());
                 const char* x = static_cast<const char*>(a.in(0).raw());
                 char* y = static_cast<char*>(a.out(0).raw());
                 const Shape& xs = a.in(0).shape();
                 ew::broadcast_loop(a.out(0).shape(), xs, xs, [&](int64_t i, int64_t ix, int64_t) {
                   std::memcpy(y + i * es, x + ix * es, es);
                 });
               }));
  R.add_kernel(op::bias_add, kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 const float* x = a.in(0).data<float>();
                 const float* b = a.in(1).data<float>();
                 float* y = a.out(0).data<float>();
                 int64_t C = a.in(1).numel();
                 for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) y[i] = x[i] + b[i % C];
               }));
  R.add_kernel(op::softmax, kRef, softmax_factory(ew::softmax_row));
  R.add_kernel(op::log_softmax, kRef, softmax_factory(ew::log_softmax_row));
  R.add_kernel(op::softmax_grad, kRef, softmax_grad_factory(ew::softmax_grad_row));
  R.add_kernel(op::log_softmax_grad, kRef, softmax_grad_factory(ew::log_softmax_grad_row));
}

}  // namespace lockstep
