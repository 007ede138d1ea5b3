// cpu backend: batch_matmul on oneDNN's batched matmul primitive (broadcast batch dims as
// stride-0 / size-1 dims, transposes as strides; bf16 in and out with f32 accumulation),
// OpenMP rms_norm (+ grad) and random_categorical (the shared sampling kernel).
#include <omp.h>

#include "backends/cpu/dnnl_common.h"
#include "ops/internal/transformer_math.h"

namespace lockstep::cpu {
namespace {

// The dims and strides of a [..., R, C] operand padded with leading 1s to `rank`, read
// transposed (its last two dims swapped) when `t`.
memory::desc operand_desc(const Shape& s, int rank, bool t, dt type) {
  memory::dims dims(size_t(rank), 1), strides(size_t(rank), 0);
  std::vector<int64_t> st(size_t(s.rank()));
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[size_t(i)] = acc;
    acc *= s[i];
  }
  const int off = rank - s.rank();
  for (int i = 0; i < s.rank(); ++i) {
    dims[size_t(off + i)] = s[i];
    strides[size_t(off + i)] = st[size_t(i)];
  }
  for (int i = 0; i < off; ++i) strides[size_t(i)] = acc;
  if (t) {
    std::swap(dims[size_t(rank - 1)], dims[size_t(rank - 2)]);
    std::swap(strides[size_t(rank - 1)], strides[size_t(rank - 2)]);
  }
  return memory::desc(dims, type, strides);
}

class BatchMatmul final : public Kernel {
 public:
  BatchMatmul(const Shape& a, const Shape& b, const Shape& y, bool ta, bool tb, dt type) {
    const int rank = y.rank();
    memory::desc ad = operand_desc(a, rank, ta, type), bd = operand_desc(b, rank, tb, type);
    memory::desc cd = operand_desc(y, rank, false, type);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(ad, bd, cd), user_scratchpad_attr(),
                                    engine());
    a_ = memory(ad, engine(), DNNL_MEMORY_NONE);
    b_ = memory(bd, engine(), DNNL_MEMORY_NONE);
    c_ = memory(cd, engine(), DNNL_MEMORY_NONE);
    scratch_.bytes = pd.scratchpad_desc().get_size();
    scratch_.init();
    exec_.prim = dnnl::matmul(pd);
    exec_.arg(DNNL_ARG_SRC, a_);
    exec_.arg(DNNL_ARG_WEIGHTS, b_);
    exec_.arg(DNNL_ARG_DST, c_);
    exec_.arg(DNNL_ARG_SCRATCHPAD, scratch_.mem);
  }
  size_t workspace_bytes() const override { return scratch_.aligned(); }
  void run(const KernelArgs& a) override {
    a_.set_data_handle(a.in(0).raw());
    b_.set_data_handle(a.in(1).raw());
    c_.set_data_handle(a.out(0).raw());
    scratch_.bind(static_cast<char*>(a.workspace));
    exec_.run();
  }

 private:
  memory a_, b_, c_;
  Scratch scratch_;
  Exec exec_;
};

// All f32 or all bf16; another mix runs the f32 kernel between conversions. Shapes oneDNN
// refuses (more than 12 dims, a bf16 matmul on a CPU without bf16 support) run the reference.
KernelFactory batch_matmul_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    if (!same_float_type({in[0], in[1], n.outputs[0]}))
      return bf16_via_f32(n, in, batch_matmul_factory());
    const Shape& y = n.outputs[0].shape;
    if (y.rank() > 12 || y.numel() == 0)
      return reference_fallback(n, in, "oneDNN's matmul takes at most 12 dims and no empty one");
    try {
      return std::make_unique<BatchMatmul>(in[0].shape, in[1].shape, y, attr_b(n, "transpose_a"),
                                           attr_b(n, "transpose_b"), to_dt(in[0].dtype));
    } catch (const dnnl::error& e) {
      return reference_fallback(n, in,
                                std::string("oneDNN refused the batched matmul: ") + e.what());
    }
  };
}

// Rows split between threads; each row's statistics in one thread (deterministic).
std::unique_ptr<Kernel> rms_norm(const Node& n, const std::vector<TensorType>& in) {
  const int64_t C = in[0].shape[-1], rows = in[0].shape.numel() / std::max<int64_t>(C, 1);
  const double eps = attr_f(n, "epsilon");
  return make_kernel([=](const KernelArgs& a) {
    const float *x = in_f(a, 0), *s = in_f(a, 1);
    float* y = out_f(a, 0);
#pragma omp parallel for schedule(static) if (rows * C > 32768)
    for (int64_t r = 0; r < rows; ++r) tmath::rms_norm_rows(x, s, y, C, eps, r, r + 1);
  });
}

std::unique_ptr<Kernel> rms_norm_grad(const Node& n, const std::vector<TensorType>& in) {
  const int64_t C = in[1].shape[-1], rows = in[1].shape.numel() / std::max<int64_t>(C, 1);
  const double eps = attr_f(n, "epsilon");
  return make_kernel(
      [=](const KernelArgs& a) {
        const float *dy = in_f(a, 0), *x = in_f(a, 1), *s = in_f(a, 2);
        float *dx = out_f(a, 0), *ds = out_f(a, 1), *rstd = static_cast<float*>(a.workspace);
        const bool par = rows * C > 32768;
#pragma omp parallel for schedule(static) if (par)
        for (int64_t r = 0; r < rows; ++r)
          tmath::rms_norm_grad_rows(dy, x, s, dx, rstd, C, eps, r, r + 1);
#pragma omp parallel for schedule(static) if (par)
        for (int64_t c = 0; c < C; ++c) tmath::rms_norm_dscale(dy, x, rstd, ds, rows, C, c, c + 1);
      },
      size_t(rows) * sizeof(float));
}

}  // namespace

LOCKSTEP_REGISTER(cpu_transformer_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::batch_matmul, "cpu", batch_matmul_factory(), /*takes_bf16=*/true);
  R.add_kernel(op::rms_norm, "cpu", rms_norm);
  R.add_kernel(op::rms_norm_grad, "cpu", rms_norm_grad);
  R.add_kernel(op::random_categorical, "cpu", tmath::random_categorical_kernel);
}

}  // namespace lockstep::cpu
