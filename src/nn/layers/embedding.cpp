// Embedding: row `id` of the table `embeddings` [input_dim, output_dim] for each integer id
// (the gather op, whose gradient is a scatter-add); with mask_zero its output carries the mask
// id != 0. Masking: the steps whose features all equal mask_value become zeros, and the mask
// says which steps are kept. Both as Keras 3 (keras/src/layers/core/embedding.py, masking.py).
#include "lockstep/nn/embedding.h"

#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

Value to_f32(Graph& g, Value x) {
  return g.type(x).dtype == DType::f32 ? x : g.add(op::cast, {x}, Attrs{{"dtype", "float32"}});
}

class EmbeddingLayer : public Layer {
 public:
  EmbeddingLayer(int64_t input_dim, int64_t output_dim, layers::EmbeddingOptions o)
      : Layer(o.name), input_dim_(input_dim), output_dim_(output_dim), o_(std::move(o)) {
    if (o_.embeddings_initializer == "uniform") o_.embeddings_initializer = "random_uniform";
    try {
      LS_CHECK(input_dim_ > 0, "input_dim must be a positive integer, got ", input_dim_);
      LS_CHECK(output_dim_ > 0, "output_dim must be a positive integer, got ", output_dim_);
      check_initializer(o_.embeddings_initializer);
    } catch (const Error& e) {
      LS_FAIL("Embedding '", name(), "': ", e.what());
    }
  }
  std::string class_name() const override { return "Embedding"; }
  json layer_config() const override {
    return {{"input_dim", input_dim_},
            {"output_dim", output_dim_},
            {"embeddings_initializer", layer_util::initializer_json(o_.embeddings_initializer)},
            {"embeddings_regularizer", layer_util::regularizer_json(o_.embeddings_regularizer_l2)},
            {"activity_regularizer", nullptr},
            {"embeddings_constraint", nullptr},
            {"mask_zero", o_.mask_zero},
            {"quantization_config", nullptr}};
  }
  void build(const std::vector<Shape>&) override {
    table_ = add_weight("embeddings", Shape{input_dim_, output_dim_}, o_.embeddings_initializer);
  }
  // Keras's supports_masking = mask_zero: an Embedding without it does not take a mask.
  bool supports_masking() const override { return o_.mask_zero; }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value ids = in.at(0);
    const DType t = g.type(ids).dtype;
    if (t != DType::i32 && t != DType::i64)  // Keras: ops.cast(inputs, "int32")
      ids = g.add(op::cast, {ids}, Attrs{{"dtype", "int32"}}, name());
    // Keras reads the float32 table (autocast = False) and casts the rows it took to the
    // compute dtype: the same values as a bfloat16 table, without converting all of it.
    Value y = g.add(op::gather, {ctx.read(table_), ids}, {}, name());
    const DType compute = dtype_policy().compute;
    if (compute != DType::f32)
      y = g.add(op::cast, {y}, Attrs{{"dtype", std::string(dtype_name(compute))}}, name());
    add_l2(ctx, table_, o_.embeddings_regularizer_l2);
    return {y};
  }
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& in,
                                  const std::vector<Value>&, int num_outputs) override {
    if (!o_.mask_zero) return std::vector<Value>(size_t(num_outputs));
    Graph& g = ctx.graph;
    Value ids = to_f32(g, in.at(0));  // (a nonzero id stays nonzero in float32)
    Value keep = g.add(op::not_equal, {ids, g.add(op::zeros_like, {ids})}, {}, name() + "/mask");
    return {g.add(op::cast, {keep}, Attrs{{"dtype", "float32"}}, name() + "/mask")};
  }

 protected:
  // Ids stay as they come (a float id is truncated to int32, never rounded to bfloat16 first).
  bool computes_in_f32() const override { return true; }
  bool autocasts_variables() const override { return false; }

 private:
  int64_t input_dim_, output_dim_;
  layers::EmbeddingOptions o_;
  VariablePtr table_;
};

// [N, T, F] -> [N, T, 1] (keepdims) or [N, T]: float32 1 where any feature differs from v.
Value any_differs(Graph& g, Value x, double v, bool keepdims) {
  Value xf = to_f32(g, x);
  Value ref =
      g.add(op::scale_shift, {g.add(op::zeros_like, {xf})}, Attrs{{"scale", 1.0}, {"shift", v}});
  Value ne = g.add(op::cast, {g.add(op::not_equal, {xf, ref})}, Attrs{{"dtype", "float32"}});
  return g.add(op::stop_gradient,
               {g.add(op::reduce_max, {ne},
                      Attrs{{"axes", std::vector<int64_t>{-1}}, {"keepdims", keepdims}})});
}

class MaskingLayer : public Layer {
 public:
  MaskingLayer(double mask_value, std::string name)
      : Layer(std::move(name)), mask_value_(mask_value) {}
  std::string class_name() const override { return "Masking"; }
  json layer_config() const override { return {{"mask_value", mask_value_}}; }
  bool supports_masking() const override { return true; }
  void build(const std::vector<Shape>& in) override {
    LS_CHECK(in.at(0).rank() >= 3, "Masking '", name(),
             "': expected input of rank >= 3 (batch, time, features), got ", in.at(0).str());
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0), m = any_differs(g, x, mask_value_, true);
    if (g.type(x).dtype != DType::f32)
      m = g.add(op::cast, {m}, Attrs{{"dtype", std::string(dtype_name(g.type(x).dtype))}});
    return {g.add(op::mul, {x, m}, {}, name())};
  }
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& in,
                                  const std::vector<Value>&, int num_outputs) override {
    Value m = any_differs(ctx.graph, in.at(0), mask_value_, false);
    return std::vector<Value>(size_t(num_outputs), m);
  }

 private:
  double mask_value_;
};

}  // namespace

namespace layers {

LayerHandle Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions o) {
  o.name = layer_util::default_name(o.name, "embedding");
  return LayerPtr(std::make_shared<EmbeddingLayer>(input_dim, output_dim, std::move(o)));
}

LayerHandle Masking(double mask_value, std::string name) {
  return LayerPtr(
      std::make_shared<MaskingLayer>(mask_value, layer_util::default_name(name, "masking")));
}

}  // namespace layers
}  // namespace lockstep
