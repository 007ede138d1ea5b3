// bf16_via_f32 (op_registry.h): a kernel without bf16 support on a node with bf16 inputs or
// outputs converts the bf16 inputs to f32 in its workspace, runs the f32 kernel built for an
// f32 copy of the node, and rounds its results into the bf16 outputs. Correct for every op (the
// reference backend runs bf16 this way: f32 arithmetic on bf16-rounded values); the cpu
// backend's hot ops take bf16 natively.
#include "lockstep/core/allocator.h"
#include "lockstep/graph/op_registry.h"

namespace lockstep {

namespace {

class Bf16Adapter final : public Kernel {
 public:
  Bf16Adapter(const Node& nd, std::vector<TensorType> in_types, const KernelFactory& f)
      : node_(std::make_unique<Node>(nd)) {
    auto take = [&](const TensorType& t) {
      size_t off = bytes_;
      bytes_ += checked_round_up(checked_bytes(t.shape, 4, "bf16 conversion buffer"), kAlignment,
                                 "bf16 conversion buffer");
      return off;
    };
    for (int i = 0; i < int(in_types.size()); ++i)
      if (in_types[i].dtype == DType::bf16) {
        ins_.push_back({i, take(in_types[i]), in_types[i].shape});
        in_types[i].dtype = DType::f32;
      }
    for (int k = 0; k < int(node_->outputs.size()); ++k)
      if (node_->outputs[k].dtype == DType::bf16) {
        outs_.push_back({k, take(node_->outputs[k]), node_->outputs[k].shape});
        node_->outputs[k].dtype = DType::f32;
      }
    inner_ = f(*node_, in_types);
  }
  size_t workspace_bytes() const override { return bytes_ + inner_->workspace_bytes(); }
  std::string fallback_reason() const override { return inner_->fallback_reason(); }
  std::string algorithm() const override { return inner_->algorithm(); }
  void run(const KernelArgs& a) override {
    if (a.workspace != bound_ws_ || a.inputs != bound_in_) bind(a);
    for (const Conv& c : ins_)
      bf16_to_f32(a.in(c.index).data<bf16>(), in32_[size_t(c.index)].data<float>(),
                  c.shape.numel());
    inner_->run(args_);
    for (const Conv& c : outs_)
      f32_to_bf16(out32_[size_t(c.index)].data<float>(), a.out(c.index).data<bf16>(),
                  c.shape.numel());
  }

 private:
  struct Conv {
    int index;
    size_t offset;
    Shape shape;
  };
  // The inner kernel's arguments: the caller's tensors, with f32 workspace views for bf16 ones.
  // Rebuilt only when the caller's buffers change (once for a compiled program).
  void bind(const KernelArgs& a) {
    char* ws = static_cast<char*>(a.workspace);
    in32_.assign(a.inputs, a.inputs + a.num_inputs);
    out32_.assign(a.outputs, a.outputs + a.num_outputs);
    for (const Conv& c : ins_)
      in32_[size_t(c.index)] = Tensor::borrow(ws + c.offset, c.shape, DType::f32);
    for (const Conv& c : outs_)
      out32_[size_t(c.index)] = Tensor::borrow(ws + c.offset, c.shape, DType::f32);
    args_ = KernelArgs{in32_.data(),       int(in32_.size()), out32_.data(),
                       int(out32_.size()), ws + bytes_,       a.step};
    bound_ws_ = a.workspace;
    bound_in_ = a.inputs;
  }
  std::unique_ptr<Node> node_;  // f32 copy; the inner kernel may keep a pointer to it
  std::unique_ptr<Kernel> inner_;
  std::vector<Conv> ins_, outs_;
  size_t bytes_ = 0;
  std::vector<Tensor> in32_, out32_;
  KernelArgs args_;
  const void* bound_ws_ = nullptr;
  const Tensor* bound_in_ = nullptr;
};

}  // namespace

std::unique_ptr<Kernel> bf16_via_f32(const Node& n, const std::vector<TensorType>& in,
                                     const KernelFactory& f) {
  return std::make_unique<Bf16Adapter>(n, in, f);
}

}  // namespace lockstep
