// CPU (OpenMP) kernels for reductions over leading, trailing or consecutive middle axes
// (deterministic: the summation order does not depend on the thread count), softmax along the last
// axis, sparse softmax cross-entropy (+ grad) and sparse categorical accuracy. Other axes use the
// reference kernel, which the executable reports.
#include <algorithm>
#include <cstring>
#include <memory>

#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

const char* kCpu = "cpu";
constexpr int64_t kParallelMin = 1 << 15;
constexpr int64_t kChunks = 64;  // fixed row chunks for reductions with few columns

// x viewed as [outer, inner]; reduced over dim 0 (leading) or dim 1 (trailing). Or, for
// consecutive middle axes (middle: e.g. global pooling's [1, 2] of NHWC), as [pre, mid, post]
// reduced over mid.
struct ReduceSplit {
  bool ok = false, leading = false, middle = false;
  int64_t outer = 1, inner = 1;
  int64_t pre = 1, mid = 1, post = 1;
};
ReduceSplit split_reduce(const Node& n, const Shape& x) {
  auto axes = ew::reduce_axes(n, x.rank());
  ReduceSplit s;
  int k = int(axes.size());
  bool lead = true, trail = true, run = true;
  for (int i = 0; i < k; ++i) {
    lead &= axes[i] == i;
    trail &= axes[i] == x.rank() - k + i;
    run &= axes[i] == axes[0] + i;
  }
  if (!lead && !trail) {
    if (!run) return s;
    s.ok = s.middle = true;
    for (int i = 0; i < x.rank(); ++i)
      (i < axes[0] ? s.pre : i < axes[0] + k ? s.mid : s.post) *= x[i];
    return s;
  }
  s.ok = true;
  s.leading = lead;
  int cut = lead ? k : x.rank() - k;
  for (int i = 0; i < x.rank(); ++i) (i < cut ? s.outer : s.inner) *= x[i];
  return s;
}

// T: storage of x and y (f32, or bf16 under mixed precision; sums accumulate in f32).
template <class T>
struct ReduceSumKernel : Kernel {
  ReduceSplit s;
  bool mean;
  ReduceSumKernel(ReduceSplit s, bool mean) : s(s), mean(mean) {}
  size_t workspace_bytes() const override {
    if (s.middle) return size_t(s.pre * s.post) * sizeof(float);
    return s.leading ? size_t(kChunks * s.inner) * sizeof(float) : 0;
  }
  void run(const KernelArgs& a) override {
    const T* x = a.in(0).data<T>();
    T* y = a.out(0).data<T>();
    if (s.middle) {  // each [mid, post] block summed row by row in f32, blocks in parallel
      const int64_t P = s.post, M = s.mid;
      const float scale = mean && M ? 1.f / float(M) : 1.f;
      float* acc_all = static_cast<float*>(a.workspace);
#pragma omp parallel for if (s.pre * M * P > kParallelMin) schedule(static)
      for (int64_t o = 0; o < s.pre; ++o) {
        float* __restrict acc = acc_all + o * P;
        const T* __restrict xo = x + o * M * P;
        std::memset(acc, 0, size_t(P) * sizeof(float));
        for (int64_t m = 0; m < M; ++m) {
#pragma omp simd
          for (int64_t c = 0; c < P; ++c) acc[c] += ld(xo[m * P + c]);
        }
        for (int64_t c = 0; c < P; ++c) y[o * P + c] = st<T>(acc[c] * scale);
      }
      return;
    }
    const int64_t R = s.outer, C = s.inner;
    const bool big = R * C > kParallelMin;
    if (!s.leading) {  // sum each row of C
      const float scale = mean && C ? 1.f / float(C) : 1.f;
#pragma omp parallel for if (big) schedule(static)
      for (int64_t r = 0; r < R; ++r) {
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < C; ++c) acc += ld(x[r * C + c]);
        y[r] = st<T>(acc * scale);
      }
      return;
    }
    const float scale = mean && R ? 1.f / float(R) : 1.f;
    // Partial sums over fixed row chunks, then a fixed-order sum of the partials.
    float* part = static_cast<float*>(a.workspace);
    const int64_t chunks = std::min<int64_t>(kChunks, std::max<int64_t>(R, 1));
    const int64_t per = (R + chunks - 1) / chunks;
#pragma omp parallel for if (big) schedule(static)
    for (int64_t p = 0; p < chunks; ++p) {
      float* acc = part + p * C;
      std::memset(acc, 0, size_t(C) * sizeof(float));
      for (int64_t r = p * per, end = std::min(R, (p + 1) * per); r < end; ++r) {
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) acc[c] += ld(x[r * C + c]);
      }
    }
#pragma omp parallel for if (big && C > 256) schedule(static)
    for (int64_t c = 0; c < C; ++c) {
      float acc = 0;
      for (int64_t p = 0; p < chunks; ++p) acc += part[p * C + c];
      y[c] = st<T>(acc * scale);
    }
  }
};

// dx[outer, inner] = dy broadcast back (times 1/count for mean).
template <class T>
struct ReduceSumGradKernel : Kernel {
  ReduceSplit s;
  bool mean;
  ReduceSumGradKernel(ReduceSplit s, bool mean) : s(s), mean(mean) {}
  void run(const KernelArgs& a) override {
    const T* dy = a.in(0).data<T>();
    T* dx = a.out(0).data<T>();
    if (s.middle) {
      const int64_t P = s.post, M = s.mid;
      const float scale = mean && M ? 1.f / float(M) : 1.f;
#pragma omp parallel for if (s.pre * M * P > kParallelMin) schedule(static)
      for (int64_t o = 0; o < s.pre; ++o)
        for (int64_t m = 0; m < M; ++m) {
          T* __restrict d = dx + (o * M + m) * P;
          const T* __restrict g = dy + o * P;
#pragma omp simd
          for (int64_t c = 0; c < P; ++c) d[c] = st<T>(ld(g[c]) * scale);
        }
      return;
    }
    const int64_t R = s.outer, C = s.inner;
    const int64_t count = s.leading ? R : C;
    const float scale = mean && count ? 1.f / float(count) : 1.f;
    const bool lead = s.leading;
#pragma omp parallel for if (R * C > kParallelMin) schedule(static)
    for (int64_t r = 0; r < R; ++r) {
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dx[r * C + c] = st<T>(ld(lead ? dy[c] : dy[r]) * scale);
    }
  }
};

// The layout pass's blocked form (f32): x (or dx) [N, C/16, H*W, 16] reduced over axes [0, 1, 2]
// (y[C]) or [1, 2] (y[N, C]). Each (image, channel block) sums its H*W rows in f32; the images
// then join in a fixed order, so the result does not depend on the thread count.
struct BlockedReduce {
  int64_t N, CB, HW;
  bool per_image, mean;
};

BlockedReduce blocked_reduce(const Node& n, const Shape& x, bool mean) {
  LS_CHECK(x.rank() == 4 && x[3] % 16 == 0, n.op, " '", n.name,
           "': a blocked (nChw16c) tensor must be 4-D with channels a multiple of 16, got ",
           x.str());
  auto axes = ew::reduce_axes(n, 4);
  return {x[0], x[3] / 16, x[1] * x[2], axes.size() == 2, mean};
}

std::unique_ptr<Kernel> blocked_sum_kernel(const BlockedReduce b) {
  return make_kernel(
      [b](const KernelArgs& a) {
        const float* x = a.in(0).data<float>();
        float* y = a.out(0).data<float>();
        // [N, C] per-image sums: y itself for a per-image reduction.
        float* part = b.per_image ? y : static_cast<float*>(a.workspace);
        const int64_t C = b.CB * 16;
#pragma omp parallel for collapse(2) if (b.N * b.CB * b.HW * 16 > kParallelMin) schedule(static)
        for (int64_t n = 0; n < b.N; ++n)
          for (int64_t cb = 0; cb < b.CB; ++cb) {
            const float* __restrict xb = x + (n * b.CB + cb) * b.HW * 16;
            float acc[16] = {};
            for (int64_t r = 0; r < b.HW; ++r) {
#pragma omp simd
              for (int c = 0; c < 16; ++c) acc[c] += xb[r * 16 + c];
            }
            float* __restrict p = part + n * C + cb * 16;
            const float s = b.mean ? 1.f / float(b.per_image ? b.HW : b.HW * b.N) : 1.f;
            for (int c = 0; c < 16; ++c) p[c] = acc[c] * s;
          }
        if (b.per_image) return;
        for (int64_t c = 0; c < C; ++c) {
          float acc = 0;
          for (int64_t n = 0; n < b.N; ++n) acc += part[n * C + c];
          y[c] = acc;
        }
      },
      b.per_image ? 0 : sizeof(float) * size_t(b.N * b.CB * 16));
}

std::unique_ptr<Kernel> blocked_sum_grad_kernel(const BlockedReduce b) {
  return make_kernel([b](const KernelArgs& a) {
    const float* dy = a.in(0).data<float>();
    float* dx = a.out(0).data<float>();
    const int64_t C = b.CB * 16;
    const float s = b.mean ? 1.f / float(b.per_image ? b.HW : b.HW * b.N) : 1.f;
#pragma omp parallel for collapse(2) if (b.N * b.CB * b.HW * 16 > kParallelMin) schedule(static)
    for (int64_t n = 0; n < b.N; ++n)
      for (int64_t cb = 0; cb < b.CB; ++cb) {
        const float* __restrict g = dy + (b.per_image ? n * C : 0) + cb * 16;
        float v[16];
        for (int c = 0; c < 16; ++c) v[c] = g[c] * s;
        float* __restrict xb = dx + (n * b.CB + cb) * b.HW * 16;
        for (int64_t r = 0; r < b.HW; ++r) {
#pragma omp simd
          for (int c = 0; c < 16; ++c) xb[r * 16 + c] = v[c];
        }
      }
  });
}

template <template <class> class K>
KernelFactory reduce_factory(bool mean, int shape_input) {
  return [mean, shape_input](const Node& n,
                             const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    if (attr_s(n, "layout") == "nChw16c") {
      for (const TensorType& t : in)
        LS_CHECK(t.dtype == DType::f32, n.op, " '", n.name, "': blocked tensors must be float32");
      const BlockedReduce b = blocked_reduce(n, in[size_t(shape_input)].shape, mean);
      return shape_input == 0 ? blocked_sum_kernel(b) : blocked_sum_grad_kernel(b);
    }
    ReduceSplit s = split_reduce(n, in[shape_input].shape);
    if (!s.ok)
      return reference_fallback(n, in,
                                "axes that are not consecutive: the cpu loops reduce over "
                                "one run of consecutive axes");
    return by_float_kind(n, in, reduce_factory<K>(mean, shape_input),
                         [&](auto t) -> std::unique_ptr<Kernel> {
                           return std::make_unique<K<decltype(t)>>(s, mean);
                         });
  };
}

// Row-wise ops along the last axis: rows run in parallel, each with the shared row function.
template <class F>
KernelFactory last_axis_factory(F body) {
  return [body](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    int r = in[0].shape.rank();
    int64_t axis = attr_i(n, "axis");
    if (axis != -1 && axis != r - 1)
      return reference_fallback(n, in,
                                "axis " + std::to_string(axis) + " of rank " + std::to_string(r) +
                                    ": the cpu loop is along the last axis");
    return simple_kernel([body](const Node&, const KernelArgs& a) {
      const int64_t C = a.in(0).dim(-1), e = a.in(0).numel(), R = C ? e / C : 0;
#pragma omp parallel for if (e > kParallelMin / 4) schedule(static)
      for (int64_t i = 0; i < R; ++i) body(a, i * C, C);
    })(n, in);
  };
}

// Labels are validated serially before the parallel loop (no throwing inside OpenMP).
std::unique_ptr<Kernel> sparse_xent(const Node& n, const std::vector<TensorType>&) {
  return make_kernel([&n, ls = float(attr_f(n, "label_smoothing"))](const KernelArgs& a) {
    const int64_t C = a.in(0).dim(-1), N = C ? a.in(0).numel() / C : 0;
    const auto lab = ew::labels_of(a.in(1));
    ew::check_labels(n, lab, N, C);
    const float* z = a.in(0).data<float>();
    float* loss = a.out(0).data<float>();
#pragma omp parallel for if (N * C > kParallelMin / 4) schedule(static)
    for (int64_t r = 0; r < N; ++r) loss[r] = ew::sparse_xent_row(z + r * C, C, lab[r], ls);
  });
}

std::unique_ptr<Kernel> sparse_xent_grad(const Node& n, const std::vector<TensorType>&) {
  return make_kernel([&n, ls = float(attr_f(n, "label_smoothing"))](const KernelArgs& a) {
    const int64_t C = a.in(1).dim(-1), N = C ? a.in(1).numel() / C : 0;
    const auto lab = ew::labels_of(a.in(2));
    ew::check_labels(n, lab, N, C);
    const float* dy = a.in(0).data<float>();
    const float* z = a.in(1).data<float>();
    float* dz = a.out(0).data<float>();
#pragma omp parallel for if (N * C > kParallelMin / 4) schedule(static)
    for (int64_t r = 0; r < N; ++r)
      ew::sparse_xent_grad_row(z + r * C, C, lab[r], ls, dy[r], dz + r * C);
  });
}

void sparse_accuracy(const Node&, const KernelArgs& a) {
  const int64_t C = a.in(0).dim(-1), N = C ? a.in(0).numel() / C : 0;
  const auto lab = ew::labels_of(a.in(1));
  const float* p = a.in(0).data<float>();
  float* acc = a.out(0).data<float>();
#pragma omp parallel for if (N * C > kParallelMin / 4) schedule(static)
  for (int64_t r = 0; r < N; ++r) acc[r] = ew::argmax_row(p + r * C, C) == lab[r] ? 1.f : 0.f;
}

}  // namespace

LOCKSTEP_REGISTER(cpu_reduce_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::reduce_sum, kCpu, reduce_factory<ReduceSumKernel>(false, 0), true);
  R.add_kernel(op::reduce_mean, kCpu, reduce_factory<ReduceSumKernel>(true, 0), true);
  R.add_kernel(op::reduce_sum_grad, kCpu, reduce_factory<ReduceSumGradKernel>(false, 1), true);
  R.add_kernel(op::reduce_mean_grad, kCpu, reduce_factory<ReduceSumGradKernel>(true, 1), true);

  R.add_kernel(op::softmax, kCpu,
               last_axis_factory([](const KernelArgs& a, int64_t off, int64_t C) {
                 ew::softmax_row(a.in(0).data<float>() + off, a.out(0).data<float>() + off, C, 1);
               }));
  R.add_kernel(
      op::log_softmax, kCpu, last_axis_factory([](const KernelArgs& a, int64_t off, int64_t C) {
        ew::log_softmax_row(a.in(0).data<float>() + off, a.out(0).data<float>() + off, C, 1);
      }));
  R.add_kernel(op::softmax_grad, kCpu,
               last_axis_factory([](const KernelArgs& a, int64_t off, int64_t C) {
                 ew::softmax_grad_row(a.in(0).data<float>() + off, a.in(1).data<float>() + off,
                                      a.out(0).data<float>() + off, C, 1);
               }));
  R.add_kernel(op::log_softmax_grad, kCpu,
               last_axis_factory([](const KernelArgs& a, int64_t off, int64_t C) {
                 ew::log_softmax_grad_row(a.in(0).data<float>() + off, a.in(1).data<float>() + off,
                                          a.out(0).data<float>() + off, C, 1);
               }));

  R.add_kernel(op::sparse_softmax_cross_entropy, kCpu, sparse_xent);
  R.add_kernel(op::sparse_softmax_cross_entropy_grad, kCpu, sparse_xent_grad);
  R.add_kernel(op::sparse_categorical_accuracy, kCpu, simple_kernel(sparse_accuracy));
}

}  // namespace lockstep
