// Merge layers: Add, Multiply (n-ary, broadcast-compatible shapes) and Concatenate.
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

std::string shapes_str(const Graph& g, const std::vector<Value>& in) {
  std::string r;
  for (size_t i = 0; i < in.size(); ++i) r += (i ? ", " : "") + g.type(in[i]).shape.str();
  return r;
}

class ElementwiseMerge : public Layer {
 public:
  ElementwiseMerge(bool mul, std::string name) : Layer(std::move(name)), mul_(mul) {}
  std::string class_name() const override { return mul_ ? "Multiply" : "Add"; }
  bool supports_masking() const override { return true; }
  // Keras's Merge.compute_mask: the OR of the inputs' masks when every input has one, else none.
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>&,
                                  const std::vector<Value>& masks, int num_outputs) override {
    if (masks.empty()) return std::vector<Value>(size_t(num_outputs));
    for (Value m : masks)
      if (!m.valid()) return std::vector<Value>(size_t(num_outputs));
    Value y = masks[0];
    for (size_t i = 1; i < masks.size(); ++i) y = ctx.graph.add(op::maximum, {y, masks[i]});
    return std::vector<Value>(size_t(num_outputs), y);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    LS_CHECK(!in.empty(), "should be called on a list of at least 1 input");
    const Shape s0 = g.type(in[0]).shape;
    for (size_t i = 1; i < in.size(); ++i) {
      const Shape si = g.type(in[i]).shape;
      bool ok = si.rank() == s0.rank();
      for (int d = 0; ok && d < s0.rank(); ++d)
        ok = s0[d] == si[d] || s0[d] == 1 || si[d] == 1 || s0[d] < 0 || si[d] < 0;
      LS_CHECK(ok, "inputs must have the same shape (or broadcast), got ", shapes_str(g, in));
    }
    Value y = in[0];
    for (size_t i = 1; i < in.size(); ++i)
      y = g.add(mul_ ? op::mul : op::add, {y, in[i]}, {}, name());
    return {y};
  }

 private:
  bool mul_;
};

// A mask of ones, [N, T], for an input [N, T, ...] that has none.
Value ones_mask(Graph& g, Value x) {
  const int r = g.type(x).shape.rank();
  if (g.type(x).dtype != DType::f32) x = g.add(op::cast, {x}, Attrs{{"dtype", "float32"}});
  if (r > 2) {
    std::vector<int64_t> axes;
    for (int d = 2; d < r; ++d) axes.push_back(d);
    x = g.add(op::reduce_max, {x}, Attrs{{"axes", axes}, {"keepdims", false}});
  }
  return g.add(op::ones_like, {g.add(op::stop_gradient, {x})});
}

class ConcatenateLayer : public Layer {
 public:
  ConcatenateLayer(int64_t axis, std::string name) : Layer(std::move(name)), axis_(axis) {}
  std::string class_name() const override { return "Concatenate"; }
  bool supports_masking() const override { return true; }
  // Keras's Concatenate.compute_mask: an input without a mask counts as all ones; along the time
  // axis (1) the masks are joined, along a feature axis a step is kept where every mask keeps it.
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& in,
                                  const std::vector<Value>& masks, int num_outputs) override {
    if (masks.empty()) return std::vector<Value>(size_t(num_outputs));
    Graph& g = ctx.graph;
    const int r = g.type(in[0]).shape.rank();
    std::vector<Value> full;
    for (size_t i = 0; i < masks.size(); ++i)
      full.push_back(masks[i].valid() ? masks[i] : ones_mask(g, in[i]));
    const int64_t axis = axis_ < 0 ? axis_ + r : axis_;
    Value y = full[0];
    if (axis == 1) {
      y = full.size() == 1 ? y : g.add(op::concat, full, Attrs{{"axis", int64_t(1)}});
    } else {
      for (size_t i = 1; i < full.size(); ++i) y = g.add(op::minimum, {y, full[i]});
    }
    return std::vector<Value>(size_t(num_outputs), y);
  }
  json layer_config() const override { return {{"axis", axis_}}; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    LS_CHECK(!in.empty(), "should be called on a list of at least 1 input");
    const Shape s0 = g.type(in[0]).shape;
    const int r = s0.rank();
    int64_t axis = axis_ < 0 ? axis_ + r : axis_;
    LS_CHECK(axis >= 1 && axis < r, "axis ", axis_, " is out of range for inputs of rank ", r,
             " (the batch axis 0 cannot be concatenated); got ", shapes_str(g, in));
    for (size_t i = 1; i < in.size(); ++i) {
      const Shape si = g.type(in[i]).shape;
      bool ok = si.rank() == r;
      for (int d = 0; ok && d < r; ++d) ok = d == axis || si[d] == s0[d] || si[d] < 0 || s0[d] < 0;
      LS_CHECK(ok, "inputs must match on all axes except the concatenation axis ", axis_, "; got ",
               shapes_str(g, in));
    }
    if (in.size() == 1) return {in[0]};
    return {g.add(op::concat, in, Attrs{{"axis", axis}}, name())};
  }

 private:
  int64_t axis_;
};

}  // namespace

namespace layers {

LayerHandle Add(std::string name) {
  return LayerPtr(std::make_shared<ElementwiseMerge>(false, layer_util::default_name(name, "add")));
}

LayerHandle Multiply(std::string name) {
  return LayerPtr(
      std::make_shared<ElementwiseMerge>(true, layer_util::default_name(name, "multiply")));
}

LayerHandle Concatenate(int64_t axis, std::string name) {
  return LayerPtr(
      std::make_shared<ConcatenateLayer>(axis, layer_util::default_name(name, "concatenate")));
}

}  // namespace layers
}  // namespace lockstep
