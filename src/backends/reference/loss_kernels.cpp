// Reference kernels for losses and metrics (one row of C classes at a time).
#include "ops/internal/kernel_math.h"

namespace lockstep {

namespace {

const char* kRef = "reference";

int64_t classes(const Tensor& t) { return t.dim(-1); }
int64_t rows(const Tensor& t) { return t.numel() / t.dim(-1); }

}  // namespace

LOCKSTEP_REGISTER(reference_loss_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel("sparse_softmax_cross_entropy", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 int64_t C = classes(a.in(0)), N = rows(a.in(0));
                 auto lab = ew::labels_of(a.in(1));
                 ew::check_labels(n, lab, N, C);
                 float ls = float(n.attrs.f("label_smoothing", 0.0));
                 const float* z = a.in(0).data<float>();
                 float* loss = a.out(0).data<float>();
                 for (int64_t r = 0; r < N; ++r) loss[r] = ew::sparse_xent_row(z + r * C, C, lab[r], ls);
               }));
  R.add_kernel("sparse_softmax_cross_entropy_grad", kRef,
               simple_kernel([](const Node& n, const KernelArgs& a) {
                 int64_t C = classes(a.in(1)), N = rows(a.in(1));
                 auto lab = ew::labels_of(a.in(2));
                 ew::check_labels(n, lab, N, C);
                 float ls = float(n.attrs.f("label_smoothing", 0.0));
                 const float* dy = a.in(0).data<float>();
                 const float* z = a.in(1).data<float>();
                 float* dz = a.out(0).data<float>();
                 for (int64_t r = 0; r < N; ++r)
                   ew::sparse_xent_grad_row(z + r * C, C, lab[r], ls, dy[r], dz + r * C);
               }));
  R.add_kernel("softmax_cross_entropy", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 int64_t C = classes(a.in(0)), N = rows(a.in(0));
                 float ls = float(n.attrs.f("label_smoothing", 0.0));
                 const float* z = a.in(0).data<float>();
                 const float* t = a.in(1).data<float>();
                 float* loss = a.out(0).data<float>();
                 for (int64_t r = 0; r < N; ++r) loss[r] = ew::xent_row(z + r * C, t + r * C, C, ls);
               }));
  R.add_kernel("softmax_cross_entropy_grad", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 int64_t C = classes(a.in(1)), N = rows(a.in(1));
                 float ls = float(n.attrs.f("label_smoothing", 0.0));
                 const float* dy = a.in(0).data<float>();
                 const float* z = a.in(1).data<float>();
                 const float* t = a.in(2).data<float>();
                 float* dz = a.out(0).data<float>();
                 float* dt = a.out(1).data<float>();
                 for (int64_t r = 0; r < N; ++r)
                   ew::xent_grad_row(z + r * C, t + r * C, C, ls, dy[r], dz + r * C, dt + r * C);
               }));
  R.add_kernel("sigmoid_cross_entropy", kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 const float* z = a.in(0).data<float>();
                 const float* t = a.in(1).data<float>();
                 float* loss = a.out(0).data<float>();
                 for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) loss[i] = ew::sigmoid_xent(z[i], t[i]);
               }));
  R.add_kernel("sigmoid_cross_entropy_grad", kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 const float* dy = a.in(0).data<float>();
                 const float* z = a.in(1).data<float>();
                 const float* t = a.in(2).data<float>();
                 float* dz = a.out(0).data<float>();
                 float* dt = a.out(1).data<float>();
                 for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) {
                   dz[i] = dy[i] * (ew::sigmoid(z[i]) - t[i]);
                   dt[i] = -dy[i] * z[i];
                 }
               }));
  R.add_kernel("sparse_categorical_accuracy", kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 int64_t C = classes(a.in(0)), N = rows(a.in(0));
                 auto lab = ew::labels_of(a.in(1));
                 const float* p = a.in(0).data<float>();
                 float* acc = a.out(0).data<float>();
                 for (int64_t r = 0; r < N; ++r) acc[r] = ew::argmax_row(p + r * C, C) == lab[r] ? 1.f : 0.f;
               }));
  R.add_kernel("categorical_accuracy", kRef, simple_kernel([](const Node&, const KernelArgs& a) {
                 int64_t C = classes(a.in(0)), N = rows(a.in(0));
                 const float* p = a.in(0).data<float>();
                 const float* t = a.in(1).data<float>();
                 float* acc = a.out(0).data<float>();
                 for (int64_t r = 0; r < N; ++r)
                   acc[r] = ew::argmax_row(p + r * C, C) == ew::argmax_row(t + r * C, C) ? 1.f : 0.f;
               }));
  // Hit when fewer than k classes score strictly higher than the label (ties count as hits).
  R.add_kernel("in_top_k", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 int64_t C = classes(a.in(0)), N = rows(a.in(0)), k = n.attrs.i("k", 1);
                 auto lab = ew::labels_of(a.in(1));
                 const float* p = a.in(0).data<float>();
                 float* acc = a.out(0).data<float>();
                 for (int64_t r = 0; r < N; ++r) {
                   int64_t l = lab[r];
                   if (l < 0 || l >= C) { acc[r] = 0.f; continue; }
                   int64_t higher = 0;
                   for (int64_t j = 0; j < C; ++j) higher += p[r * C + j] > p[r * C + l];
                   acc[r] = higher < k ? 1.f : 0.f;
                 }
               }));
  // Keras: targets == (pred > threshold).
  R.add_kernel("binary_accuracy", kRef, simple_kernel([](const Node& n, const KernelArgs& a) {
                 float th = float(n.attrs.f("threshold", 0.5));
                 const float* p = a.in(0).data<float>();
                 const float* t = a.in(1).data<float>();
                 float* acc = a.out(0).data<float>();
                 for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i)
                   acc[i] = t[i] == (p[i] > th ? 1.f : 0.f) ? 1.f : 0.f;
               }));
}

}  // namespace lockstep
