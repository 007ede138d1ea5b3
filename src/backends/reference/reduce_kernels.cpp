// Reference kernels for reductions, broadcast_to, bias_add and softmax/log_softmax (+ grads).
#include <cstring>
#include <vector>

#include "backends/reference/ew_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";

// Maps each element of x (row-major) to its output element: f(i_x, i_out).
template <class F>
void reduce_loop(const Node& n, const Shape& x, F f) {
  Shape keep = ew::keep_shape(x, ew::reduce_axes(n, x.rank()));
  ew::broadcast_loop(x, keep, keep, [&](int64_t i, int64_t o, int64_t) { f(i, o); });
}

void reduce_sum_kernel(const Node& n, const KernelArgs& a, bool mean) {
  const float* x = a.in(0).data<float>();
  float* y = a.out(0).data<float>();
  int64_t m = a.out(0).numel();
  std::vector<double> acc(size_t(m), 0.0);
  reduce_loop(n, a.in(0).shape(), [&](int64_t i, int64_t o) { acc[o] += x[i]; });
  double count = m ? double(a.in(0).numel()) / double(m) : 1.0;
  for (int64_t o = 0; o < m; ++o) y[o] = float(mean ? acc[o] / count : acc[o]);
}

void reduce_sum_grad_kernel(const Node& n, const KernelArgs& a, bool mean) {
  const float* dy = a.in(0).data<float>();
  float* dx = a.out(0).data<float>();
  int64_t m = a.in(0).numel();
  float scale = mean && m ? float(double(m) / double(a.out(0).numel())) : 1.f;
  reduce_loop(n, a.out(0).shape(), [&](int64_t i, int64_t o) { dx[i] = dy[o] * scale; });
}

// Splits a tensor around `axis` into outer x C x inner.
void split_axis(const Shape& s, int64_t axis, int64_t& outer, int64_t& C, int64_t& inner) {
  if (axis < 0) axis += s.rank();
  outer = inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  C = s[int(axis)];
  for (int i = int(axis) + 1; i < s.rank(); ++i) inner *= s[i];
}

template <class F>
void softmax_kernel(const Node& n, const KernelArgs& a, F row) {
  int64_t outer, C, inner;
  split_axis(a.in(0).shape(), n.attrs.i("axis", -1), outer, C, inner);
  const float* x = a.in(0).data<float>();
  float* y = a.out(0).data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) row(x + o * C * inner + i, y + o * C * inner + i, C, inner);
}

template <class F>
void softmax_grad_kernel(const Node& n, const KernelArgs& a, F row) {
  int64_t outer, C, inner;
  split_axis(a.in(0).shape(), n.attrs.i("axis", -1), outer, C, inner);
  const float* dy = a.in(0).data<float>();
  const float* y = a.in(1).data<float>();
  float* dx = a.out(0).data<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t off = o * C * inner + i;
      row(dy + off, y + off, dx + off, C, inner);
    }
}

}  // namespace

LOCKSTEP_REGISTER(reference_reduce_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel("reduce_sum", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 reduce_sum_kernel(n, a, false);
               }));
  R.add_kernel("reduce_mean", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 reduce_sum_kernel(n, a, true);
               }));
  R.add_kernel("reduce_sum_grad", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 reduce_sum_grad_kernel(n, a, false);
               }));
  R.add_kernel("reduce_mean_grad", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 reduce_sum_grad_kernel(n, a, true);
               }));
  R.add_kernel("reduce_max", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 const float* x = a.in(0).data<float>();
                 float* y = a.out(0).data<float>();
                 for (int64_t o = 0, m = a.out(0).numel(); o < m; ++o)
                   y[o] = -std::numeric_limits<float>::infinity();
                 reduce_loop(n, a.in(0).shape(), [&](int64_t i, int64_t o) { y[o] = std::max(y[o], x[i]); });
               }));
  // dx = dy where x equals the max, split evenly between ties.
  R.add_kernel("reduce_max_grad", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 const float* dy = a.in(0).data<float>();
                 const float* x = a.in(1).data<float>();
                 const float* y = a.in(2).data<float>();
                 float* dx = a.out(0).data<float>();
                 std::vector<int64_t> count(size_t(a.in(0).numel()), 0);
                 reduce_loop(n, a.in(1).shape(), [&](int64_t i, int64_t o) { count[o] += x[i] == y[o]; });
                 reduce_loop(n, a.in(1).shape(), [&](int64_t i, int64_t o) {
                   dx[i] = x[i] == y[o] ? dy[o] / float(count[o]) : 0.f;
                 });
               }));
  R.add_kernel("broadcast_to", kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 size_t es = dtype_size(a.in(0).dtype());
                 const char* x = static_cast<const char*>(a.in(0).raw());
                 char* y = static_cast<char*>(a.out(0).raw());
                 const Shape& xs = a.in(0).shape();
                 ew::broadcast_loop(a.out(0).shape(), xs, xs, [&](int64_t i, int64_t ix, int64_t) {
                   std::memcpy(y + i * es, x + ix * es, es);
                 });
               }));
  R.add_kernel("bias_add", kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 const float* x = a.in(0).data<float>();
                 const float* b = a.in(1).data<float>();
                 float* y = a.out(0).data<float>();
                 int64_t C = a.in(1).numel();
                 for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) y[i] = x[i] + b[i % C];
               }));
  R.add_kernel("softmax", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 softmax_kernel(n, a, ew::softmax_row);
               }));
  R.add_kernel("log_softmax", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 softmax_kernel(n, a, ew::log_softmax_row);
               }));
  R.add_kernel("softmax_grad", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 softmax_grad_kernel(n, a, ew::softmax_grad_row);
               }));
  R.add_kernel("log_softmax_grad", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 softmax_grad_kernel(n, a, ew::log_softmax_grad_row);
               }));
}

}  // namespace lockstep
