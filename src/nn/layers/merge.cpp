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

class ConcatenateLayer : public Layer {
 public:
  ConcatenateLayer(int64_t axis, std::string name) : Layer(std::move(name)), axis_(axis) {}
  std::string class_name() const override { return "Concatenate"; }
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
