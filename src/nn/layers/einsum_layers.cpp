// EinsumDense, RMSNormalization, UnitNormalization, Softmax and AdditiveAttention (Keras 3's
// configs and weight layouts; lockstep/nn/einsum_layers.h). EinsumDense is ops::einsum of the
// input and its kernel; the normalisations compute in float32 under mixed_bfloat16 and return
// the compute dtype, as Keras does.
#include <algorithm>
#include <cctype>

#include "lockstep/ops/transformer.h"
#include "nn/layers/layer_util.h"

namespace lockstep {

namespace einsum_layer {

namespace {

[[noreturn]] void bad(const std::string& layer, const std::string& what) {
  LS_FAIL("EinsumDense '", layer, "': ", what);
}

// "ab,bc->ac", "...b,bc->...c" or "ab...,bc->ac..." split into its three terms and where the
// ellipsis is (Keras's three accepted forms).
struct Split {
  std::string in, kernel, out;
  int ellipsis = 0;  // 0 none, -1 left, +1 right
};

Split split(const std::string& layer, const std::string& equation) {
  Split s;
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  const size_t comma = eq.find(','), arrow = eq.find("->");
  if (comma == std::string::npos || arrow == std::string::npos || arrow < comma)
    bad(layer, "equation \"" + equation + "\" must read \"<input>,<kernel>-><output>\"");
  s.in = eq.substr(0, comma);
  s.kernel = eq.substr(comma + 1, arrow - comma - 1);
  s.out = eq.substr(arrow + 2);
  auto strip = [&](std::string& t, bool left) {
    const size_t d = t.find("...");
    if (d == std::string::npos) return false;
    if ((left && d != 0) || (!left && d + 3 != t.size()))
      bad(layer, "equation \"" + equation +
                     "\": the ellipsis must start both the input and the output, or end both "
                     "(Keras's forms ...X,Y->...Z and X...,Y->Z...)");
    t.erase(d, 3);
    return true;
  };
  const bool left = s.in.rfind("...", 0) == 0;
  const bool in_e = strip(s.in, left), out_e = strip(s.out, left);
  if (in_e != out_e)
    bad(layer, "equation \"" + equation + "\": the ellipsis must be in both the input and output");
  if (in_e) s.ellipsis = left ? -1 : 1;
  for (const std::string* t : {&s.in, &s.kernel, &s.out})
    for (char c : *t)
      if (!std::isalpha(static_cast<unsigned char>(c)))
        bad(layer, "equation \"" + equation + "\" holds '" + std::string(1, c) +
                       "' (letters, one \"...\" and \"->\" only)");
  return s;
}

// The kernel's and bias's shapes and the full output shape (batch first) of an EinsumDense.
struct Analysis {
  std::vector<int64_t> kernel, bias;
  Shape output;
};

// Keras's _analyze_einsum_string: each kernel letter's size from the output (output_shape) or
// the input; the bias over the output letters from the first bias axis on (1 for the others).
Analysis analyze(const std::string& layer, const std::string& equation,
                 const std::string& bias_axes, const Shape& input,
                 const std::vector<int64_t>& output_shape) {
  const Split s = split(layer, equation);
  const int elided = input.rank() - int(s.in.size());
  if (elided < 0 || (elided > 0 && s.ellipsis == 0))
    bad(layer, "equation \"" + equation + "\" has " + std::to_string(s.in.size()) +
                   " input letters for an input of shape " + input.str() +
                   " (pass inputs of that rank, or use \"...\")");
  // The full output shape: the batch dim, then output_shape, with the elided dims inserted.
  std::vector<int64_t> out{input[0]};
  out.insert(out.end(), output_shape.begin(), output_shape.end());
  if (s.ellipsis < 0)
    for (int i = 1; i < elided; ++i) out.insert(out.begin() + i, input[i]);
  if (s.ellipsis > 0)
    for (int i = input.rank() - elided; i < input.rank(); ++i) out.push_back(input[i]);
  const int left = s.ellipsis < 0 ? elided : 0;
  if (int(out.size()) != int(s.out.size()) + elided)
    bad(layer, "output_shape has " + std::to_string(output_shape.size()) + " dims; equation \"" +
                   equation + "\" gives the output " +
                   std::to_string(s.out.size() + size_t(elided) - 1) + " besides the batch");
  auto in_dim = [&](char c) { return input[int(s.in.find(c)) + left]; };
  auto out_at = [&](char c) -> int64_t& { return out[s.out.find(c) + size_t(left)]; };
  for (char c : s.out) {
    if (s.in.find(c) != std::string::npos) {
      if (out_at(c) >= 0 && in_dim(c) >= 0 && out_at(c) != in_dim(c))
        bad(layer, std::string("output_shape gives letter '") + c + "' size " +
                       std::to_string(out_at(c)) + ", the input " + std::to_string(in_dim(c)));
      out_at(c) = in_dim(c);
    } else if (s.kernel.find(c) == std::string::npos) {
      bad(layer, std::string("output letter '") + c + "' of \"" + equation +
                     "\" is in neither the input nor the kernel");
    }
  }
  Analysis a;
  for (char c : s.kernel) {
    int64_t d = -1;
    if (s.out.find(c) != std::string::npos)
      d = out_at(c);
    else if (s.in.find(c) != std::string::npos)
      d = in_dim(c);
    else
      bad(layer, std::string("kernel letter '") + c + "' of \"" + equation +
                     "\" is in neither the input nor the output (the kernel must be fully given)");
    if (d <= 0)
      bad(layer, std::string("kernel letter '") + c + "' has no known size (input " + input.str() +
                     "; give it in output_shape)");
    a.kernel.push_back(d);
  }
  for (char c : bias_axes)
    if (s.out.find(c) == std::string::npos)
      bad(layer,
          std::string("bias_axes letter '") + c + "' is not in the output \"" + s.out + "\"");
  if (!bias_axes.empty()) {
    size_t first = s.out.size();
    for (char c : bias_axes) first = std::min(first, s.out.find(c));
    for (size_t i = first; i < s.out.size(); ++i)
      a.bias.push_back(bias_axes.find(s.out[i]) != std::string::npos ? out_at(s.out[i]) : 1);
    if (s.ellipsis > 0)
      for (int i = 0; i < elided; ++i) a.bias.push_back(1);
  }
  a.output = Shape(out);
  return a;
}

}  // namespace
}  // namespace einsum_layer

namespace {

using layer_util::initializer_json;

class EinsumDenseLayer : public Layer {
 public:
  EinsumDenseLayer(std::string equation, std::vector<int64_t> output_shape,
                   layers::EinsumDenseOptions o, std::string name)
      : Layer(std::move(name)),
        eq_(std::move(equation)),
        out_(std::move(output_shape)),
        o_(std::move(o)) {
    try {
      layer_util::check_activation(o_.activation);
      check_initializer(o_.kernel_initializer);
      check_initializer(o_.bias_initializer);
    } catch (const Error& e) {
      LS_FAIL("EinsumDense '", this->name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "EinsumDense"; }
  json layer_config() const override {
    json shape = json::array();
    for (int64_t d : out_) shape.push_back(d < 0 ? json(nullptr) : json(d));
    return {{"output_shape", shape},
            {"equation", eq_},
            {"activation", o_.activation.empty() ? "linear" : o_.activation},
            {"bias_axes", o_.bias_axes.empty() ? json(nullptr) : json(o_.bias_axes)},
            {"kernel_initializer", initializer_json(o_.kernel_initializer)},
            {"bias_initializer", initializer_json(o_.bias_initializer)},
            {"kernel_regularizer", layer_util::regularizer_json(o_.kernel_regularizer_l2)},
            {"bias_regularizer", layer_util::regularizer_json(o_.bias_regularizer_l2)},
            {"activity_regularizer", nullptr},
            {"kernel_constraint", nullptr},
            {"bias_constraint", nullptr}};
  }
  void build(const std::vector<Shape>& in) override {
    const einsum_layer::Analysis a =
        einsum_layer::analyze(name(), eq_, o_.bias_axes, in.at(0), out_);
    kernel_ = add_weight("kernel", Shape(a.kernel), o_.kernel_initializer);
    if (!a.bias.empty()) bias_ = add_weight("bias", Shape(a.bias), o_.bias_initializer);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value y = ops::einsum(g, eq_, in.at(0), ctx.read(kernel_), name());
    if (bias_) y = g.add(op::add, {y, ctx.read(bias_)}, {}, name());
    y = apply_activation(g, y, o_.activation, name());
    add_l2(ctx, kernel_, o_.kernel_regularizer_l2);
    if (bias_) add_l2(ctx, bias_, o_.bias_regularizer_l2);
    return {y};
  }

 private:
  std::string eq_;
  std::vector<int64_t> out_;
  layers::EinsumDenseOptions o_;
  VariablePtr kernel_, bias_;
};

// x cast to f32 (the normalisations compute in float32) and the result back to `like`'s dtype.
Value to_f32(Graph& g, Value x, const std::string& name) {
  return g.type(x).dtype == DType::f32 ? x
                                       : g.add(op::cast, {x}, Attrs{{"dtype", "float32"}}, name);
}
Value to_dtype(Graph& g, Value x, DType t, const std::string& name) {
  return g.type(x).dtype == t
             ? x
             : g.add(op::cast, {x}, Attrs{{"dtype", std::string(dtype_name(t))}}, name);
}

class RMSNormLayer : public Layer {
 public:
  bool autocasts_variables() const override { return false; }
  RMSNormLayer(layers::RMSNormOptions o, std::string name)
      : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(o_.epsilon > 0, "RMSNormalization '", this->name(),
             "': epsilon must be positive, got ", o_.epsilon);
  }
  std::string class_name() const override { return "RMSNormalization"; }
  bool supports_masking() const override { return true; }
  json layer_config() const override { return {{"axis", o_.axis}, {"epsilon", o_.epsilon}}; }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    const int r = s.rank();
    LS_CHECK(o_.axis == -1 || o_.axis == r - 1, "RMSNormalization '", name(),
             "': only the last axis (-1 or ", r - 1, ") is supported, got axis=", o_.axis,
             " for input ", s.str());
    LS_CHECK(s[-1] > 0, "RMSNormalization '", name(), "': the last dimension must be known, got ",
             s.str());
    scale_ = add_weight("scale", Shape{s[-1]}, "ones");
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const DType t = g.type(in.at(0)).dtype;
    Value y = ops::rms_norm(g, to_f32(g, in.at(0), name()), ctx.read(scale_), o_.epsilon, name());
    return {to_dtype(g, y, t, name())};
  }

 private:
  layers::RMSNormOptions o_;
  VariablePtr scale_;
};

// x * min(rsqrt(sum(x^2, axes)), 1e12): keras.ops.normalize(order=2, epsilon=1e-12).
class UnitNormLayer : public Layer {
 public:
  UnitNormLayer(std::vector<int64_t> axis, std::string name)
      : Layer(std::move(name)), axis_(std::move(axis)) {
    LS_CHECK(!axis_.empty(), "UnitNormalization '", this->name(), "': axis must not be empty");
  }
  std::string class_name() const override { return "UnitNormalization"; }
  bool supports_masking() const override { return true; }
  json layer_config() const override {
    return {{"axis", axis_.size() == 1 ? json(axis_[0]) : json(axis_)}};
  }
  void build(const std::vector<Shape>& in) override {
    const int r = in.at(0).rank();
    for (int64_t a : axis_)
      LS_CHECK(a >= -r && a < r && a != 0 && a != -r, "UnitNormalization '", name(), "': axis ", a,
               " is out of range (or the batch axis) for input ", in.at(0).str());
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const DType t = g.type(in.at(0)).dtype;
    Value x = to_f32(g, in.at(0), name());
    Value ss = g.add(op::reduce_sum, {g.add(op::square, {x}, {}, name())},
                     Attrs{{"axes", axis_}, {"keepdims", true}}, name());
    Value one = g.add(op::constant, {}, Attrs{{"value", 1.0}}, name());
    Value inv = g.add(op::div, {one, g.add(op::sqrt, {ss}, {}, name())}, {}, name());
    inv = g.add(op::minimum, {inv, g.add(op::constant, {}, Attrs{{"value", 1e12}}, name())}, {},
                name());
    return {to_dtype(g, g.add(op::mul, {x, inv}, {}, name()), t, name())};
  }

 private:
  std::vector<int64_t> axis_;
};

// Masks: an incoming Keras mask (ctx.masks[0], aligned to the input's leading dims as Keras
// broadcasts it from the right) or a second input.
class SoftmaxLayer : public Layer {
 public:
  SoftmaxLayer(std::vector<int64_t> axis, std::string name)
      : Layer(std::move(name)), axis_(std::move(axis)) {
    LS_CHECK(!axis_.empty(), "Softmax '", this->name(), "': axis must not be empty");
  }
  std::string class_name() const override { return "Softmax"; }
  bool supports_masking() const override { return true; }
  json layer_config() const override {
    return {{"axis", axis_.size() == 1 ? json(axis_[0]) : json(axis_)}};
  }
  void build(const std::vector<Shape>& in) override {
    const int r = in.at(0).rank();
    for (int64_t a : axis_)
      LS_CHECK(a >= -r && a < r, "Softmax '", name(), "': axis ", a, " is out of range for input ",
               in.at(0).str());
    if (in.size() > 1) check_mask(in.at(0), in.at(1));
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    const DType t = g.type(in.at(0)).dtype;
    Value mask = in.size() > 1 ? in[1] : (ctx.masks.empty() ? Value{} : ctx.masks[0]);
    if (mask.valid()) check_mask(g.type(in[0]).shape, g.type(mask).shape);
    Value y = ops::masked_softmax(g, to_f32(g, in.at(0), name()), mask, axis_, name());
    return {to_dtype(g, y, t, name())};
  }

 private:
  void check_mask(const Shape& x, const Shape& m) const {
    bool ok = m.rank() <= x.rank();
    for (int i = 1; ok && i <= m.rank(); ++i)
      ok = m[-i] == 1 || m[-i] == x[-i] || m[-i] < 0 || x[-i] < 0;
    LS_CHECK(ok, "Softmax '", name(), "': the mask ", m.str(), " must broadcast to the input ",
             x.str(), " (each mask dim 1 or the input's, aligned from the last)");
  }
  std::vector<int64_t> axis_;
};

}  // namespace

namespace layers {

LayerHandle EinsumDense(std::string equation, std::vector<int64_t> output_shape,
                        EinsumDenseOptions o) {
  std::string n = layer_util::default_name(o.name, "einsum_dense");
  return LayerPtr(std::make_shared<EinsumDenseLayer>(std::move(equation), std::move(output_shape),
                                                     std::move(o), n));
}

LayerHandle RMSNormalization(RMSNormOptions o) {
  std::string n = layer_util::default_name(o.name, "rms_normalization");
  return LayerPtr(std::make_shared<RMSNormLayer>(std::move(o), n));
}

LayerHandle UnitNormalization(std::vector<int64_t> axis, std::string name) {
  std::string n = layer_util::default_name(name, "unit_normalization");
  return LayerPtr(std::make_shared<UnitNormLayer>(std::move(axis), n));
}

LayerHandle Softmax(std::vector<int64_t> axis, std::string name) {
  std::string n = layer_util::default_name(name, "softmax");
  return LayerPtr(std::make_shared<SoftmaxLayer>(std::move(axis), n));
}

}  // namespace layers
}  // namespace lockstep
