// Reference kernels for losses and metrics (one row of C classes at a time).
#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

const char* kRef = "reference";
using Types = std::vector<TensorType>;

int64_t classes(const Tensor& t) { return t.dim(-1); }
int64_t rows(const Tensor& t) { return t.numel() / t.dim(-1); }

std::unique_ptr<Kernel> sparse_xent(const Node& n, const Types&) {
  return make_kernel([&n, ls = float(attr_f(n, "label_smoothing"))](const KernelArgs& a) {
    int64_t C = classes(a.in(0)), N = rows(a.in(0));
    auto lab = ew::labels_of(a.in(1));
    ew::check_labels(n, lab, N, C);
    const float* z = a.in(0).data<float>();
    float* loss = a.out(0).data<float>();
    for (int64_t r = 0; r < N; ++r) loss[r] = ew::sparse_xent_row(z + r * C, C, lab[r], ls);
  });
}

std::unique_ptr<Kernel> sparse_xent_grad(const Node& n, const Types&) {
  return make_kernel([&n, ls = float(attr_f(n, "label_smoothing"))](const KernelArgs& a) {
    int64_t C = classes(a.in(1)), N = rows(a.in(1));
    auto lab = ew::labels_of(a.in(2));
    ew::check_labels(n, lab, N, C);
    const float* dy = a.in(0).data<float>();
    const float* z = a.in(1).data<float>();
    float* dz = a.out(0).data<float>();
    for (int64_t r = 0; r < N; ++r)
      ew::sparse_xent_grad_row(z + r * C, C, lab[r], ls, dy[r], dz + r * C);
  });
}

std::unique_ptr<Kernel> xent(const Node& n, const Types&) {
  return make_kernel([ls = float(attr_f(n, "label_smoothing"))](const KernelArgs& a) {
    int64_t C = classes(a.in(0)), N = rows(a.in(0));
    const float* z = a.in(0).data<float>();
    const float* t = a.in(1).data<float>();
    float* loss = a.out(0).data<float>();
    for (int64_t r = 0; r < N; ++r) loss[r] = ew::xent_row(z + r * C, t + r * C, C, ls);
  });
}

std::unique_ptr<Kernel> xent_grad(const Node& n, const Types&) {
  return make_kernel([ls = float(attr_f(n, "label_smoothing"))](const KernelArgs& a) {
    int64_t C = classes(a.in(1)), N = rows(a.in(1));
    const float* dy = a.in(0).data<float>();
    const float* z = a.in(1).data<float>();
    const float* t = a.in(2).data<float>();
    float* dz = a.out(0).data<float>();
    float* dt = a.out(1).data<float>();
    for (int64_t r = 0; r < N; ++r)
      ew::xent_grad_row(z + r * C, t + r * C, C, ls, dy[r], dz + r * C, dt + r * C);
  });
}

void sigmoid_xent(const Node&, const KernelArgs& a) {
  const float* z = a.in(0).data<float>();
  const float* t = a.in(1).data<float>();
  float* loss = a.out(0).data<float>();
  for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) loss[i] = ew::sigmoid_xent(z[i], t[i]);
}

void sigmoid_xent_grad(const Node&, const KernelArgs& a) {
  const float* dy = a.in(0).data<float>();
  const float* z = a.in(1).data<float>();
  const float* t = a.in(2).data<float>();
  float* dz = a.out(0).data<float>();
  float* dt = a.out(1).data<float>();
  for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i) {
    dz[i] = dy[i] * (ew::sigmoid(z[i]) - t[i]);
    dt[i] = -dy[i] * z[i];
  }
}

void sparse_accuracy(const Node&, const KernelArgs& a) {
  int64_t C = classes(a.in(0)), N = rows(a.in(0));
  auto lab = ew::labels_of(a.in(1));
  const float* p = a.in(0).data<float>();
  float* acc = a.out(0).data<float>();
  for (int64_t r = 0; r < N; ++r) acc[r] = ew::argmax_row(p + r * C, C) == lab[r] ? 1.f : 0.f;
}

void categorical_accuracy(const Node&, const KernelArgs& a) {
  int64_t C = classes(a.in(0)), N = rows(a.in(0));
  const float* p = a.in(0).data<float>();
  const float* t = a.in(1).data<float>();
  float* acc = a.out(0).data<float>();
  for (int64_t r = 0; r < N; ++r)
    acc[r] = ew::argmax_row(p + r * C, C) == ew::argmax_row(t + r * C, C) ? 1.f : 0.f;
}

// Hit when fewer than k classes score strictly higher than the label (ties count as hits).
std::unique_ptr<Kernel> in_top_k(const Node& n, const Types&) {
  return make_kernel([k = attr_i(n, "k")](const KernelArgs& a) {
    int64_t C = classes(a.in(0)), N = rows(a.in(0));
    auto lab = ew::labels_of(a.in(1));
    const float* p = a.in(0).data<float>();
    float* acc = a.out(0).data<float>();
    for (int64_t r = 0; r < N; ++r) {
      int64_t l = lab[r];
      if (l < 0 || l >= C) {
        acc[r] = 0.f;
        continue;
      }
      int64_t higher = 0;
      for (int64_t j = 0; j < C; ++j) higher += p[r * C + j] > p[r * C + l];
      acc[r] = higher < k ? 1.f : 0.f;
    }
  });
}

// Keras: targets == (pred > threshold).
std::unique_ptr<Kernel> binary_accuracy(const Node& n, const Types&) {
  return make_kernel([th = float(attr_f(n, "threshold"))](const KernelArgs& a) {
    const float* p = a.in(0).data<float>();
    const float* t = a.in(1).data<float>();
    float* acc = a.out(0).data<float>();
    for (int64_t i = 0, e = a.out(0).numel(); i < e; ++i)
      acc[i] = t[i] == (p[i] > th ? 1.f : 0.f) ? 1.f : 0.f;
  });
}

}  // namespace

LOCKSTEP_REGISTER(reference_loss_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::sparse_softmax_cross_entropy, kRef, sparse_xent);
  R.add_kernel(op::sparse_softmax_cross_entropy_grad, kRef, sparse_xent_grad);
  R.add_kernel(op::softmax_cross_entropy, kRef, xent);
  R.add_kernel(op::softmax_cross_entropy_grad, kRef, xent_grad);
  R.add_kernel(op::sigmoid_cross_entropy, kRef, simple_kernel(sigmoid_xent));
  R.add_kernel(op::sigmoid_cross_entropy_grad, kRef, simple_kernel(sigmoid_xent_grad));
  R.add_kernel(op::sparse_categorical_accuracy, kRef, simple_kernel(sparse_accuracy));
  R.add_kernel(op::categorical_accuracy, kRef, simple_kernel(categorical_accuracy));
  R.add_kernel(op::in_top_k, kRef, in_top_k);
  R.add_kernel(op::binary_accuracy, kRef, binary_accuracy);
}

}  // namespace lockstep
