// cpu backend: matmul (with transposes) on the oneDNN matmul primitive, built once per node.
#include "backends/cpu/dnnl_common.h"

namespace lockstep::cpu {
namespace {

class Matmul final : public Kernel {
 public:
  Matmul(int64_t M, int64_t K, int64_t N, bool ta, bool tb, dt type) {
    memory::desc a({M, K}, type, ta ? tag::ba : tag::ab);
    memory::desc b({K, N}, type, tb ? tag::ba : tag::ab);
    memory::desc c({M, N}, type, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), user_scratchpad_attr(), engine());
    a_ = memory(a, engine(), DNNL_MEMORY_NONE);
    b_ = memory(b, engine(), DNNL_MEMORY_NONE);
    c_ = memory(c, engine(), DNNL_MEMORY_NONE);
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

// All f32 or all bf16 (mixed precision); another mix runs the f32 kernel between conversions.
KernelFactory matmul_factory() {
  return [](const Node& n, const std::vector<TensorType>& in) -> std::unique_ptr<Kernel> {
    if (!same_float_type({in[0], in[1], n.outputs[0]}))
      return bf16_via_f32(n, in, matmul_factory());
    const bool ta = attr_b(n, "transpose_a"), tb = attr_b(n, "transpose_b");
    return std::make_unique<Matmul>(in[0].shape[ta ? 1 : 0], in[0].shape[ta ? 0 : 1],
                                    in[1].shape[tb ? 0 : 1], ta, tb, to_dt(in[0].dtype));
  };
}

LOCKSTEP_REGISTER(cpu_matmul_kernels) {
  OpRegistry::get().add_kernel(op::matmul, "cpu", matmul_factory(), /*takes_bf16=*/true);
}

}  // namespace
}  // namespace lockstep::cpu
