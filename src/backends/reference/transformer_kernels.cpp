// Reference kernels of the transformer ops (src/ops/transformer_ops.cpp): batch_matmul (double
// accumulation), rms_norm (+ grad), rotary_embedding and random_categorical. The math is in
// ops/internal/transformer_math.h, shared with the cpu backend.
#include "ops/internal/transformer_math.h"

namespace lockstep {

namespace {

const char* kRef = "reference";
using Types = std::vector<TensorType>;

std::unique_ptr<Kernel> batch_matmul(const Node& n, const Types& in) {
  const tmath::BatchMatmulGeom g =
      tmath::batch_matmul_geom(n, in[0].shape, in[1].shape, n.outputs[0].shape);
  return make_kernel([g](const KernelArgs& a) {
    tmath::batch_matmul_ref(g, in_f(a, 0), in_f(a, 1), out_f(a, 0), 0, g.batches());
  });
}

std::unique_ptr<Kernel> rms_norm(const Node& n, const Types& in) {
  const int64_t C = in[0].shape[-1], rows = in[0].shape.numel() / std::max<int64_t>(C, 1);
  const double eps = attr_f(n, "epsilon");
  return make_kernel([=](const KernelArgs& a) {
    tmath::rms_norm_rows(in_f(a, 0), in_f(a, 1), out_f(a, 0), C, eps, 0, rows);
  });
}

std::unique_ptr<Kernel> rms_norm_grad(const Node& n, const Types& in) {
  const int64_t C = in[1].shape[-1], rows = in[1].shape.numel() / std::max<int64_t>(C, 1);
  const double eps = attr_f(n, "epsilon");
  return make_kernel(
      [=](const KernelArgs& a) {
        float* rstd = static_cast<float*>(a.workspace);
        tmath::rms_norm_grad_rows(in_f(a, 0), in_f(a, 1), in_f(a, 2), out_f(a, 0), rstd, C, eps, 0,
                                  rows);
        tmath::rms_norm_dscale(in_f(a, 0), in_f(a, 1), rstd, out_f(a, 1), rows, C, 0, C);
      },
      size_t(rows) * sizeof(float));
}

// The cos/sin tables in the workspace, then one pass over x.
std::unique_ptr<Kernel> rotary(const Node& n, const Types& in) {
  const tmath::RotaryGeom g = tmath::rotary_geom(n, in[0].shape);
  const size_t table = size_t(g.T * (g.D / 2));
  return make_kernel(
      [g, table](const KernelArgs& a) {
        double extra = 0;
        if (a.num_inputs == 2)
          extra = a.in(1).dtype() == DType::i32 ? double(a.in(1).data<int32_t>()[0])
                                                : double(a.in(1).data<float>()[0]);
        float* cs = static_cast<float*>(a.workspace);
        tmath::rotary_tables(g, extra, cs, cs + table);
        tmath::rotary_apply(g, in_f(a, 0), out_f(a, 0), cs, cs + table);
      },
      2 * table * sizeof(float));
}

}  // namespace

LOCKSTEP_REGISTER(reference_transformer_kernels) {
  auto& R = OpRegistry::get();
  R.add_kernel(op::batch_matmul, kRef, batch_matmul);
  R.add_kernel(op::rms_norm, kRef, rms_norm);
  R.add_kernel(op::rms_norm_grad, kRef, rms_norm_grad);
  R.add_kernel(op::rotary_embedding, kRef, rotary);
  R.add_kernel(op::random_categorical, kRef, tmath::random_categorical_kernel);
}

}  // namespace lockstep
