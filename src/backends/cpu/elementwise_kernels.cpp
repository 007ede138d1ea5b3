// CPU (OpenMP) kernels for elementwise ops: binaries with same-shape/scalar/row broadcasting,
// unary math and activation grads, bias_add and dropout. Other broadcasts use the reference
// kernel, which the executable reports.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "backends/cpu/vec_math.h"
#include "ops/internal/kernel_math.h"
#include "ops/internal/kernel_util.h"

namespace lockstep {

namespace {

using cpu::vec_sigmoid;

const char* kCpu = "cpu";
constexpr int64_t kParallelMin = 1 << 15;  // elements below which a loop stays serial

// True when `small` (right-aligned) equals the trailing dims of `big` after dropping its
// leading 1s, i.e. big is [rows, small.numel()] and small repeats per row.
bool is_row_of(const Shape& small, const Shape& big) {
  int k = small.rank();
  while (k > 0 && small[small.rank() - k] == 1) --k;  // skip leading 1s of small
  if (k > big.rank()) return false;
  for (int i = 1; i <= k; ++i)
    if (small[-i] != big[-i]) return false;
  return true;
}

// Whether `small` is [N, 1, ..., 1, C] against big [N, ..., C] (rank >= 3): one row of C per
// batch entry, repeated over the middle axes (squeeze-and-excitation's scale of a feature map).
bool is_batch_row_of(const Shape& small, const Shape& big) {
  if (small.rank() != big.rank() || big.rank() < 3 || small[0] != big[0] || small[-1] != big[-1])
    return false;
  for (int i = 1; i + 1 < small.rank(); ++i)
    if (small[i] != 1) return false;
  return true;
}

// Whether `small` is [N, 1, ..., 1] against big [N, ...] (rank >= 2): one scalar per batch
// entry (a Dropout with noise_shape (None, 1, 1, 1), EfficientNet's drop-connect mask). The
// entry's block is contiguous in every layout the backend uses, blocked ones included.
bool is_batch_scalar_of(const Shape& small, const Shape& big) {
  return small.rank() == big.rank() && big.rank() >= 2 && small[0] == big[0] &&
         small.numel() == small[0];
}

// b_row / a_row: one small row for every row of the big operand, or with `per` > 0 the next
// small row every `per` rows (is_batch_row_of). b_image / a_image: one scalar per block of
// `inner` elements (is_batch_scalar_of).
enum class Mode { same, b_scalar, a_scalar, b_row, a_row, b_image, a_image };

template <class F, class T>
struct BinaryKernel : Kernel {
  F f0;
  Mode mode;
  int64_t inner, per;
  BinaryKernel(F f, Mode m, int64_t inner, int64_t per) : f0(f), mode(m), inner(inner), per(per) {}
  void run(const KernelArgs& k) override {
    const T* a = k.in(0).data<T>();
    const T* b = k.in(1).data<T>();
    T* y = k.out(0).data<T>();
    auto f = [g = f0](auto u, auto v) { return st<T>(g(ld(u), ld(v))); };
    const int64_t n = k.out(0).numel();
    switch (mode) {
      case Mode::same:
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
        for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
        break;
      case Mode::b_scalar: {
        const T s = b[0];
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
        for (int64_t i = 0; i < n; ++i) y[i] = f(a[i], s);
        break;
      }
      case Mode::a_scalar: {
        const T s = a[0];
#pragma omp parallel for simd if (n > kParallelMin) schedule(static)
        for (int64_t i = 0; i < n; ++i) y[i] = f(s, b[i]);
        break;
      }
      case Mode::b_row:
      case Mode::a_row: {
        const int64_t rows = n / inner, in = inner;
        const bool brow = mode == Mode::b_row;
#pragma omp parallel for if (n > kParallelMin) schedule(static)
        for (int64_t r = 0; r < rows; ++r) {
          const T* full = (brow ? a : b) + r * in;
          const T* row = (brow ? b : a) + (per > 0 ? r / per * in : 0);
          T* yr = y + r * in;
          if (brow) {
#pragma omp simd
            for (int64_t j = 0; j < in; ++j) yr[j] = f(full[j], row[j]);
          } else {
#pragma omp simd
            for (int64_t j = 0; j < in; ++j) yr[j] = f(row[j], full[j]);
          }
        }
        break;
      }
      case Mode::b_image:
      case Mode::a_image: {
        const bool bimg = mode == Mode::b_image;
        const int64_t images = n / inner, in = inner;
        const T* full = bimg ? a : b;
        const T* small = bimg ? b : a;
        // Split by elements, not images (a batch may be smaller than the thread count).
#pragma omp parallel for if (n > kParallelMin) schedule(static)
        for (int64_t c = 0; c < (n + 4095) / 4096; ++c) {
          const int64_t lo = c * 4096, hi = std::min(n, lo + 4096);
          for (int64_t img = lo / in; img < images && img * in < hi; ++img) {
            const int64_t s = std::max(lo, img * in), e = std::min(hi, (img + 1) * in);
            const T v = small[img];
            if (bimg) {
#pragma omp simd
              for (int64_t i = s; i < e; ++i) y[i] = f(full[i], v);
            } else {
#pragma omp simd
              for (int64_t i = s; i < e; ++i) y[i] = f(v, full[i]);
            }
          }
        }
        break;
      }
    }
  }
};

template <class F>
KernelFactory binary_factory(F f) {
  return [f](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    const Shape &a = in[0].shape, &b = in[1].shape;
    Shape out = ops::broadcast_shapes(a, b);
    Mode mode;
    int64_t inner = 1, per = 0;
    if (n.attrs.has("layout") && attr_s(n, "layout") == "nChw16c") {
      // The layout pass's blocked [N, C/16, H, W, 16] image operand with one [1, 1, C] row per
      // image: 16-element rows, the row's next 16 channels every H*W of them.
      LS_CHECK(out.rank() == 4 && out[3] % 16 == 0 && float_kind(n, in) == FloatKind::f32, n.op,
               " '", n.name,
               "': a blocked (nChw16c) operand must be float32, 4-D, with "
               "channels a multiple of 16, got ",
               out.str());
      mode = a == out ? Mode::b_row : Mode::a_row;
      inner = 16;
      per = out[1] * out[2];
    } else if (a == out && b == out)
      mode = Mode::same;
    else if (a == out && b.numel() == 1)
      mode = Mode::b_scalar;
    else if (b == out && a.numel() == 1)
      mode = Mode::a_scalar;
    else if (a == out && is_row_of(b, a) && b.numel() > 0)
      mode = Mode::b_row, inner = b.numel();
    else if (b == out && is_row_of(a, b) && a.numel() > 0)
      mode = Mode::a_row, inner = a.numel();
    else if (a == out && is_batch_scalar_of(b, a) && a.numel() > 0)
      mode = Mode::b_image, inner = a.numel() / a[0];
    else if (b == out && is_batch_scalar_of(a, b) && b.numel() > 0)
      mode = Mode::a_image, inner = b.numel() / b[0];
    else if (a == out && is_batch_row_of(b, a) && b.numel() > 0)
      mode = Mode::b_row, inner = b[-1], per = a.numel() / (a[0] * b[-1]);
    else if (b == out && is_batch_row_of(a, b) && a.numel() > 0)
      mode = Mode::a_row, inner = a[-1], per = b.numel() / (b[0] * a[-1]);
    else
      return reference_fallback(
          n, in,
          "general broadcasting (" + a.str() + " with " + b.str() +
              "): the cpu loops cover same shapes, scalars, rows and per-batch rows");
    return by_float_kind(n, in, binary_factory(f), [&](auto t) -> std::unique_ptr<Kernel> {
      return std::make_unique<BinaryKernel<F, decltype(t)>>(f, mode, inner, per);
    });
  };
}

// Same values as the reference kernel: each block of 4 elements is one Philox draw. T: the
// storage type of x, y and the mask.
template <class T>
std::unique_ptr<Kernel> dropout_kernel(float r, float scale, uint64_t node) {
  return make_kernel([r, scale, node](const KernelArgs& a) {
    [[maybe_unused]] uint16_t kept = 0, dropped = 0;  // the bf16 mask's values, as bits
    if constexpr (std::is_same_v<T, bf16>) kept = f32_to_bf16(scale).bits, dropped = 0;
    const uint64_t key = ew::dropout_key(node, a.step);
    const uint64_t step = a.step ? a.step->step : 0;
    // One flat row, or one row per example under op determinism (see ew::dropout_rows).
    const ew::DropoutRows rows = ew::dropout_rows(a.in(0), a.step);
    const int64_t e = rows.row_len, blocks = (e + 3) / 4;
    const int64_t groups = (blocks + 15) / 16;  // per row; 16 Philox blocks = 64 elements
#pragma omp parallel for if (a.in(0).numel() > kParallelMin) schedule(static)
    for (int64_t rg = 0; rg < rows.rows * groups; ++rg) {
      const int64_t row = rg / groups, b0 = (rg % groups) * 16;
      const T* x = a.in(0).data<T>() + row * e;
      T* y = a.out(0).data<T>() + row * e;
      T* mask = a.out(1).data<T>() + row * e;
      uint32_t w[4][16];
      ew::philox4x32_x16(key, step, rows.counter_base(row) + uint64_t(b0), w);
      // Element 4 * l + k of the group takes word k of block l (the reference kernel's order):
      // the keep decisions are made 16 lanes at a time, interleaved into element order, and
      // the group's 64 elements then run as plain vector loops. (A loop with a branch and a
      // bf16 rounding per element took 3.7-4.7 ms per step on the reference CNN's first
      // dropout.)
      // Decided on contiguous lanes (a compare and a blend; written into m directly, the
      // compiler made it a branch per element, mispredicted on random bits).
      alignas(64) float mk[4][16], m[64];
      ew::dropout_multipliers_x16(w, r, scale, mk);
      for (int l = 0; l < 16; ++l)
        for (int k = 0; k < 4; ++k) m[4 * l + k] = mk[k][l];
      const int64_t i0 = b0 * 4, n = std::min<int64_t>(64, e - i0);
      if constexpr (std::is_same_v<T, float>) {
        const float* __restrict xg = x + i0;
        float* __restrict yg = y + i0;
        float* __restrict mg = mask + i0;
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) {
          mg[j] = m[j];
          yg[j] = xg[j] * m[j];
        }
      } else {  // bf16: the bulk conversions (AVX512-BF16 where built for it) around f32 math
        alignas(64) float v[64];
        bf16_to_f32(x + i0, v, n);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) v[j] *= m[j];
        f32_to_bf16(v, y + i0, n);
        uint16_t* __restrict mg = reinterpret_cast<uint16_t*>(mask + i0);
#pragma omp simd
        for (int64_t j = 0; j < n; ++j) mg[j] = m[j] != 0.f ? kept : dropped;
      }
    }
  });
}

// y = f(x) and dx = f(dy, x), elementwise, in f32 or bf16 storage.
template <class Make>
KernelFactory unary_factory(Make make) {
  return [make](const Node& n, const std::vector<TensorType>& in) {
    return by_float_kind(n, in, unary_factory(make), [f = make(n)](auto t) {
      using T = decltype(t);
      return make_kernel([f](const KernelArgs& a) {
        const T* x = a.in(0).data<T>();
        T* y = a.out(0).data<T>();
        const int64_t e = a.out(0).numel();
#pragma omp parallel for simd if (e > kParallelMin) schedule(static)
        for (int64_t i = 0; i < e; ++i) y[i] = st<T>(f(ld(x[i])));
      });
    });
  };
}

template <class Make>
KernelFactory unary_grad_factory(Make make) {
  return [make](const Node& n, const std::vector<TensorType>& in) {
    return by_float_kind(n, in, unary_grad_factory(make), [f = make(n)](auto t) {
      using T = decltype(t);
      return make_kernel([f](const KernelArgs& a) {
        const T* dy = a.in(0).data<T>();
        const T* v = a.in(1).data<T>();
        T* dx = a.out(0).data<T>();
        const int64_t e = a.out(0).numel();
#pragma omp parallel for simd if (e > kParallelMin) schedule(static)
        for (int64_t i = 0; i < e; ++i) dx[i] = st<T>(f(ld(dy[i]), ld(v[i])));
      });
    });
  };
}

template <class T>
void bias_add_rows(const KernelArgs& a) {
  const T* x = a.in(0).data<T>();
  const T* b = a.in(1).data<T>();
  T* y = a.out(0).data<T>();
  const int64_t C = a.in(1).numel(), e = a.out(0).numel(), rows = C ? e / C : 0;
#pragma omp parallel for if (e > kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = st<T>(ld(x[r * C + c]) + ld(b[c]));
  }
}

std::unique_ptr<Kernel> bias_add(const Node& n, const std::vector<TensorType>& in) {
  return by_float_kind(n, in, bias_add,
                       [](auto t) { return make_kernel(bias_add_rows<decltype(t)>); });
}

std::unique_ptr<Kernel> dropout(const Node& n, const std::vector<TensorType>& in) {
  const double rate = attr_f(n, "rate");
  const float r = float(rate), scale = float(1.0 / (1.0 - rate));
  const uint64_t node = ew::node_key(n);
  return by_float_kind(n, in, dropout,
                       [&](auto t) { return dropout_kernel<decltype(t)>(r, scale, node); });
}

}  // namespace

LOCKSTEP_REGISTER(cpu_elementwise_kernels) {
  auto& R = OpRegistry::get();
  ew::binary_ops(
      [&](OpId op, auto f) { R.add_kernel(op, kCpu, binary_factory(f), /*takes_bf16=*/true); });
  // sigmoid, swish and swish's gradient: the reference's formulas on vec_sigmoid.
  auto vec_sigmoid_op = [](const Node&) { return [](float x) { return vec_sigmoid(x); }; };
  auto vec_swish = [](const Node&) { return [](float x) { return x * vec_sigmoid(x); }; };
  auto vec_swish_grad = [](const Node&) {
    return [](float dy, float x) {
      const float s = vec_sigmoid(x);
      return dy * (s + x * s * (1.f - s));
    };
  };
  ew::unary_ops([&](OpId op, auto make) {
    if (op == op::sigmoid)
      R.add_kernel(op, kCpu, unary_factory(vec_sigmoid_op), /*takes_bf16=*/true);
    else if (op == op::swish)
      R.add_kernel(op, kCpu, unary_factory(vec_swish), /*takes_bf16=*/true);
    else
      R.add_kernel(op, kCpu, unary_factory(make), /*takes_bf16=*/true);
  });
  ew::unary_grad_ops([&](OpId op, auto make) {
    if (op == op::swish_grad)
      R.add_kernel(op, kCpu, unary_grad_factory(vec_swish_grad), /*takes_bf16=*/true);
    else
      R.add_kernel(op, kCpu, unary_grad_factory(make), /*takes_bf16=*/true);
  });
  R.add_kernel(op::bias_add, kCpu, bias_add, /*takes_bf16=*/true);
  R.add_kernel(op::dropout, kCpu, dropout, /*takes_bf16=*/true);
  // f32 <-> bf16 vectorised (the casts of mixed precision run every step on activations and
  // weights); other pairs (labels, images) are a conversion loop: the reference kernel's.
  R.add_kernel(
      op::cast, kCpu,
      [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
        const DType from = in[0].dtype, to = n.outputs[0].dtype;
        if (from == DType::f32 && to == DType::bf16)
          return make_kernel([](const KernelArgs& a) {
            f32_to_bf16(a.in(0).data<float>(), a.out(0).data<bf16>(), a.in(0).numel());
          });
        if (from == DType::bf16 && to == DType::f32)
          return make_kernel([](const KernelArgs& a) {
            bf16_to_f32(a.in(0).data<bf16>(), a.out(0).data<float>(), a.in(0).numel());
          });
        return (*OpRegistry::get().kernel(op::cast, "reference"))(n, in);
      },
      /*takes_bf16=*/true);
}

}  // namespace lockstep
