// Optimizer update kernels (Keras 3 formulas) and lr_schedule. Registered for "reference"
// (plain loops) and "cpu" (same loops, OpenMP-parallel; they are elementwise).
#include <cmath>

#include "lockstep/graph/op_registry.h"
#include "ops/internal/schedule_math.h"

namespace lockstep {

namespace {

constexpr int64_t kParallelMin = 1 << 14;

// Decoupled weight decay, applied before the update (Keras 3 _apply_weight_decay).
template <bool Par>
void weight_decay(float* w, int64_t n, float lr, float wd) {
  if (wd == 0.f) return;
  const float k = wd * lr;
#pragma omp parallel for simd if (Par && n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) w[i] -= w[i] * k;
}

template <bool Par>
void sgd(const Node& node, const KernelArgs& a) {
  float* w = a.in(0).data<float>();
  const float* g = a.in(1).data<float>();
  const float lr = a.in(2).data<float>()[0];
  const int64_t n = a.in(0).numel();
  const float mom = float(node.attrs.f("momentum", 0.0));
  const bool nesterov = node.attrs.b("nesterov", false);
  weight_decay<Par>(w, n, lr, float(node.attrs.f("weight_decay", 0.0)));
  if (a.num_inputs < 4) {
#pragma omp parallel for simd if (Par && n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) w[i] -= g[i] * lr;
    return;
  }
  float* m = a.in(3).data<float>();
  if (nesterov) {
#pragma omp parallel for simd if (Par && n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      m[i] = -g[i] * lr + m[i] * mom;
      w[i] += -g[i] * lr + m[i] * mom;
    }
  } else {
#pragma omp parallel for simd if (Par && n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      m[i] = -g[i] * lr + m[i] * mom;
      w[i] += m[i];
    }
  }
}

template <bool Par>
void adam(const Node& node, const KernelArgs& a) {
  float* w = a.in(0).data<float>();
  const float* g = a.in(1).data<float>();
  const float lr = a.in(2).data<float>()[0];
  float* m = a.in(3).data<float>();
  float* v = a.in(4).data<float>();
  const double t = a.in(5).data<float>()[0];
  const int64_t n = a.in(0).numel();
  const double b1 = node.attrs.f("beta_1", 0.9), b2 = node.attrs.f("beta_2", 0.999);
  const float eps = float(node.attrs.f("epsilon", 1e-7));
  weight_decay<Par>(w, n, lr, float(node.attrs.f("weight_decay", 0.0)));
  const float alpha = float(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
  const float c1 = float(1.0 - b1), c2 = float(1.0 - b2);
#pragma omp parallel for simd if (Par && n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) {
    m[i] += (g[i] - m[i]) * c1;
    v[i] += (g[i] * g[i] - v[i]) * c2;
    w[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + eps);
  }
}

template <bool Par>
void rmsprop(const Node& node, const KernelArgs& a) {
  float* w = a.in(0).data<float>();
  const float* g = a.in(1).data<float>();
  const float lr = a.in(2).data<float>()[0];
  float* ms = a.in(3).data<float>();
  float* mom = a.num_inputs > 4 ? a.in(4).data<float>() : nullptr;
  const int64_t n = a.in(0).numel();
  const float rho = float(node.attrs.f("rho", 0.9));
  const float momentum = float(node.attrs.f("momentum", 0.0));
  const float eps = float(node.attrs.f("epsilon", 1e-7));
  weight_decay<Par>(w, n, lr, float(node.attrs.f("weight_decay", 0.0)));
  if (mom && momentum > 0.f) {
#pragma omp parallel for simd if (Par && n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      ms[i] = rho * ms[i] + (1.f - rho) * (g[i] * g[i]);
      float inc = (lr * g[i]) / std::sqrt(ms[i] + eps);
      mom[i] = momentum * mom[i] + inc;
      w[i] -= mom[i];
    }
  } else {
#pragma omp parallel for simd if (Par && n >= kParallelMin)
    for (int64_t i = 0; i < n; ++i) {
      ms[i] = rho * ms[i] + (1.f - rho) * (g[i] * g[i]);
      w[i] -= (lr * g[i]) / std::sqrt(ms[i] + eps);
    }
  }
}

void lr_schedule(const Node& node, const KernelArgs& a) {
  auto step = int64_t(std::llround(double(a.in(0).data<float>()[0])));
  a.out(0).data<float>()[0] = float(ops::evaluate_schedule(node.attrs, step));
}

}  // namespace

LOCKSTEP_REGISTER(optimizer_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel("sgd_update", "reference", simple_kernel(sgd<false>));
  R.add_kernel("adam_update", "reference", simple_kernel(adam<false>));
  R.add_kernel("rmsprop_update", "reference", simple_kernel(rmsprop<false>));
  R.add_kernel("lr_schedule", "reference", simple_kernel(lr_schedule));
  R.add_kernel("sgd_update", "cpu", simple_kernel(sgd<true>));
  R.add_kernel("adam_update", "cpu", simple_kernel(adam<true>));
  R.add_kernel("rmsprop_update", "cpu", simple_kernel(rmsprop<true>));
}

}  // namespace lockstep
