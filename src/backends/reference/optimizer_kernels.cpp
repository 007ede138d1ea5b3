// Optimizer update kernels (Keras 3 formulas) and lr_schedule. Registered for "reference"
// (plain loops) and "cpu" (same loops, OpenMP-parallel; they are elementwise). Hyperparameters
// are read from the node once, when the kernel is built.
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "lockstep/graph/op_registry.h"
#include "ops/internal/kernel_util.h"
#include "ops/internal/schedule_math.h"

namespace lockstep {

namespace {

constexpr int64_t kParallelMin = 1 << 14;

// An update of `count` variables (the compiler fuses an optimizer's updates into one node):
// inputs var_1..n, grad_1..n, lr, then each slot as slot_1..n[, t]. The elements of all the
// variables form one range, split evenly over the threads (cpu) in one parallel region; each
// element's arithmetic is the same whatever the count, so a fused update is bit-identical to
// the per-variable ones.
template <bool Par, class Range>
void for_each_range(const KernelArgs& a, int count, Range range) {
  int64_t total = 0;
  for (int v = 0; v < count; ++v) total += a.in(v).numel();
#pragma omp parallel if (Par && total >= kParallelMin)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = total * t / nt, hi = total * (t + 1) / nt;
    int64_t base = 0;
    for (int v = 0; v < count && base < hi; ++v) {
      const int64_t n = a.in(v).numel(), i0 = std::max(lo - base, int64_t(0)),
                    i1 = std::min(hi - base, n);
      if (i0 < i1) range(v, i0, i1);
      base += n;
    }
  }
}

// Decoupled weight decay, applied before the update (Keras 3 _apply_weight_decay).
inline void weight_decay(float* __restrict w, int64_t i0, int64_t i1, float lr, float wd) {
  if (wd == 0.f) return;
  const float k = wd * lr;
#pragma omp simd
  for (int64_t i = i0; i < i1; ++i) w[i] -= w[i] * k;
}

struct SgdParams {
  float momentum, weight_decay;
  bool nesterov;
  int count;
};
SgdParams sgd_params(const Node& n) {
  return {float(attr_f(n, "momentum")), float(attr_f(n, "weight_decay")), attr_b(n, "nesterov"),
          int(attr_i(n, "count"))};
}

inline void sgd_range(const SgdParams& p, float* __restrict w, const float* __restrict g,
                      float* __restrict m, float lr, int64_t i0, int64_t i1) {
  const float mom = p.momentum;
  weight_decay(w, i0, i1, lr, p.weight_decay);
  if (!m) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) w[i] -= g[i] * lr;
  } else if (p.nesterov) {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      m[i] = -g[i] * lr + m[i] * mom;
      w[i] += -g[i] * lr + m[i] * mom;
    }
  } else {
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      m[i] = -g[i] * lr + m[i] * mom;
      w[i] += m[i];
    }
  }
}

template <bool Par>
void sgd(const SgdParams& p, const KernelArgs& a) {
  const int n = p.count;
  const float lr = a.in(2 * n).data<float>()[0];
  const bool momentum = a.num_inputs > 2 * n + 1;
  for_each_range<Par>(a, n, [&](int v, int64_t i0, int64_t i1) {
    sgd_range(p, a.in(v).data<float>(), a.in(n + v).data<float>(),
              momentum ? a.in(2 * n + 1 + v).data<float>() : nullptr, lr, i0, i1);
  });
}

struct AdamParams {
  double beta_1, beta_2;
  float epsilon, weight_decay;
  int count;
};
AdamParams adam_params(const Node& n) {
  return {attr_f(n, "beta_1"), attr_f(n, "beta_2"), float(attr_f(n, "epsilon")),
          float(attr_f(n, "weight_decay")), int(attr_i(n, "count"))};
}

template <bool Par>
void adam(const AdamParams& p, const KernelArgs& a) {
  const int n = p.count;
  const float lr = a.in(2 * n).data<float>()[0];
  const double t = a.in(4 * n + 1).data<float>()[0];
  const double b1 = p.beta_1, b2 = p.beta_2;
  const float eps = p.epsilon, wd = p.weight_decay;
  const float alpha = float(lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
  const float c1 = float(1.0 - b1), c2 = float(1.0 - b2);
  for_each_range<Par>(a, n, [&](int k, int64_t i0, int64_t i1) {
    float* __restrict w = a.in(k).data<float>();
    const float* __restrict g = a.in(n + k).data<float>();
    float* __restrict m = a.in(2 * n + 1 + k).data<float>();
    float* __restrict v = a.in(3 * n + 1 + k).data<float>();
    weight_decay(w, i0, i1, lr, wd);
#pragma omp simd
    for (int64_t i = i0; i < i1; ++i) {
      m[i] += (g[i] - m[i]) * c1;
      v[i] += (g[i] * g[i] - v[i]) * c2;
      w[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + eps);
    }
  });
}

struct RmspropParams {
  float rho, momentum, epsilon, weight_decay;
};
RmspropParams rmsprop_params(const Node& n) {
  return {float(attr_f(n, "rho")), float(attr_f(n, "momentum")), float(attr_f(n, "epsilon")),
          float(attr_f(n, "weight_decay"))};
}

template <bool Par>
void rmsprop(const RmspropParams& p, const KernelArgs& a) {
  float* w = a.in(0).data<float>();
  const float* g = a.in(1).data<float>();
  const float lr = a.in(2).data<float>()[0];
  float* ms = a.in(3).data<float>();
  float* mom = a.num_inputs > 4 ? a.in(4).data<float>() : nullptr;
  const int64_t n = a.in(0).numel();
  const float rho = p.rho, momentum = p.momentum, eps = p.epsilon;
  for_each_range<Par>(
      a, 1, [&](int, int64_t i0, int64_t i1) { weight_decay(w, i0, i1, lr, p.weight_decay); });
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

KernelFactory lr_schedule() {
  return [](const Node& n, const std::vector<TensorType>&) {
    return make_kernel([at = ops::compile_schedule(n.attrs)](const KernelArgs& a) {
      auto step = int64_t(std::llround(double(a.in(0).data<float>()[0])));
      a.out(0).data<float>()[0] = float(at(step));
    });
  };
}

// An update kernel: its parameters read in the factory, run(params, args) each step.
template <class Params, class Run>
KernelFactory update(Params (*read)(const Node&), Run run) {
  return [read, run](const Node& n, const std::vector<TensorType>&) {
    return make_kernel([p = read(n), run](const KernelArgs& a) { run(p, a); });
  };
}

}  // namespace

LOCKSTEP_REGISTER(optimizer_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::sgd_update, "reference", update(sgd_params, sgd<false>));
  R.add_kernel(op::adam_update, "reference", update(adam_params, adam<false>));
  R.add_kernel(op::rmsprop_update, "reference", update(rmsprop_params, rmsprop<false>));
  R.add_kernel(op::sgd_update, "cpu", update(sgd_params, sgd<true>));
  R.add_kernel(op::adam_update, "cpu", update(adam_params, adam<true>));
  R.add_kernel(op::rmsprop_update, "cpu", update(rmsprop_params, rmsprop<true>));
  // The schedule is one scalar per step: the same kernel on every host backend.
  for (const std::string& backend : host_backends())
    R.add_kernel(op::lr_schedule, backend, lr_schedule());
}

}  // namespace lockstep
