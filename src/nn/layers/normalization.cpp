// BatchNormalization (Keras 3 moving-statistics update), LayerNormalization and
// GroupNormalization (composed of reshape, reduce_mean and elementwise ops, in float32).
#include "nn/layers/layer_util.h"

namespace lockstep {
namespace {

using layer_util::initializer_json;

class BatchNormLayer : public Layer {
 public:
  bool autocasts_variables() const override { return false; }
  BatchNormLayer(layers::BatchNormOptions o, std::string name)
      : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(o_.axis == -1 || o_.axis > 0, "BatchNormalization '", this->name(),
             "': only the last axis (-1, or its index) is supported, got axis=", o_.axis);
    LS_CHECK(o_.epsilon > 0, "BatchNormalization '", this->name(),
             "': epsilon must be positive, got ", o_.epsilon);
  }
  std::string class_name() const override { return "BatchNormalization"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    return {{"axis", o_.axis},
            {"momentum", o_.momentum},
            {"epsilon", o_.epsilon},
            {"center", o_.center},
            {"scale", o_.scale},
            {"beta_initializer", initializer_json("zeros")},
            {"gamma_initializer", initializer_json("ones")},
            {"moving_mean_initializer", initializer_json("zeros")},
            {"moving_variance_initializer", initializer_json("ones")},
            {"beta_regularizer", nullptr},
            {"gamma_regularizer", nullptr},
            {"beta_constraint", nullptr},
            {"gamma_constraint", nullptr},
            {"synchronized", o_.synchronized}};
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 2, "expected input of rank >= 2, got ", s.str());
    LS_CHECK(o_.axis == -1 || o_.axis == s.rank() - 1, "BatchNormalization '", name(),
             "': only the last axis (channels_last) is supported, got axis=", o_.axis,
             " for input ", s.str());
    C_ = s[-1];
    LS_CHECK(C_ > 0, "the channel (last) dimension must be known, got ", s.str());
    if (o_.scale) gamma_ = add_weight("gamma", Shape{C_}, "ones");
    if (o_.center) beta_ = add_weight("beta", Shape{C_}, "zeros");
    moving_mean_ = add_weight("moving_mean", Shape{C_}, "zeros", false);
    moving_var_ = add_weight("moving_variance", Shape{C_}, "ones", false);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const Shape s = g.type(x).shape;
    LS_CHECK(s.rank() >= 2 && s[-1] == C_, "expected ", C_, " channels on the last axis, got ",
             s.str());
    Value gamma = gamma_ ? ctx.read(gamma_) : layer_util::constant_vector(g, C_, 1.f);
    Value beta = beta_ ? ctx.read(beta_) : layer_util::constant_vector(g, C_, 0.f);
    Attrs eps{{"epsilon", o_.epsilon}};
    // Inference, or layer frozen, itself or by a frozen nested model around it (Keras: a
    // non-trainable BN runs in inference mode).
    if (!ctx.training || !trainable || ctx.frozen) {
      return {g.add(op::batch_norm_infer,
                    {x, gamma, beta, ctx.read(moving_mean_), ctx.read(moving_var_)}, eps, name())};
    }
    const bool sync = (o_.synchronized || ctx.synchronize_batch_norm) && ctx.replica_group >= 0;
    if (sync && !ctx.replicas_in_process) return {synchronized_train(ctx, x, gamma, beta)};
    if (sync) {  // the kernel pools its sums with the other replica threads
      eps.set("group", AttrValue(ctx.replica_group));
      eps.set("replica", AttrValue(int64_t(ctx.replica)));
    }
    auto outs = g.add_multi(op::batch_norm_train, {x, gamma, beta}, eps, name());
    update(g, ctx.read(moving_mean_), outs.at(1), moving_mean_);
    update(g, ctx.read(moving_var_), outs.at(2), moving_var_);
    return {outs[0]};
  }

 private:
  // Cross-replica batch statistics (tf.keras's synchronized=True): each replica sums x and x^2
  // over its batch and spatial positions, one cross_replica_sum adds [sum, sum of squares,
  // count] over every replica, and all normalise with the global mean and (biased) variance
  // E[x^2] - E[x]^2. Built from differentiable ops, so autodiff gives the exact gradient of
  // the global-batch normalisation; N replicas x B/N match 1 replica x B.
  Value synchronized_train(CallContext& ctx, Value x, Value gamma, Value beta) {
    Graph& g = ctx.graph;
    const Shape s = g.type(x).shape;
    std::vector<int64_t> axes;
    int64_t count = 1;
    for (int d = 0; d + 1 < s.rank(); ++d) {
      axes.push_back(d);
      LS_CHECK(s[d] > 0, "BatchNormalization '", name(),
               "': synchronized statistics need a known batch shape, got ", s.str());
      count *= s[d];
    }
    Attrs sum_attrs{{"axes", axes}, {"keepdims", false}};
    Value sum = g.add(op::reduce_sum, {x}, sum_attrs, name());
    Value sumsq = g.add(op::reduce_sum, {g.add(op::square, {x}, {}, name())}, sum_attrs, name());
    Value n = layer_util::constant_vector(g, 1, float(count));
    Value packed = g.add(op::concat, {sum, sumsq, n}, Attrs{{"axis", int64_t(0)}}, name());
    Value total = g.add(op::cross_replica_sum, {packed},
                        Attrs{{"group", ctx.replica_group}, {"replica", int64_t(ctx.replica)}},
                        name() + "/cross_replica_sum");
    auto part = [&](int64_t begin, int64_t size) {
      return g.add(
          op::slice, {total},
          Attrs{{"begin", std::vector<int64_t>{begin}}, {"size", std::vector<int64_t>{size}}},
          name());
    };
    Value N = part(2 * C_, 1);
    Value mean = g.add(op::div, {part(0, C_), N}, {}, name());
    Value ex2 = g.add(op::div, {part(C_, C_), N}, {}, name());
    Value var = g.add(op::sub, {ex2, g.add(op::square, {mean}, {}, name())}, {}, name());
    var = g.add(op::maximum, {var, layer_util::constant_vector(g, 1, 0.f)}, {}, name());
    Value var_eps =
        g.add(op::scale_shift, {var}, Attrs{{"scale", 1.0}, {"shift", o_.epsilon}}, name());
    Value scale = g.add(op::div, {gamma, g.add(op::sqrt, {var_eps}, {}, name())}, {}, name());
    Value centered = g.add(op::sub, {x, mean}, {}, name());
    Value y = g.add(op::add, {g.add(op::mul, {centered, scale}, {}, name()), beta}, {}, name());
    update(g, ctx.read(moving_mean_), mean, moving_mean_);
    update(g, ctx.read(moving_var_), var, moving_var_);
    return y;
  }

  // moving = moving * momentum + batch * (1 - momentum)  (Keras 3, biased batch variance).
  void update(Graph& g, Value moving, Value batch, const VariablePtr& var) {
    const double m = o_.momentum;
    Value a = g.add(op::scale_shift, {moving}, Attrs{{"scale", m}, {"shift", 0.0}}, name());
    Value b = g.add(op::scale_shift, {batch}, Attrs{{"scale", 1.0 - m}, {"shift", 0.0}}, name());
    Value nv = g.add(op::add, {a, b}, {}, name());
    // (replicas see their own batches: the moving statistics are averaged across them)
    g.add_multi(op::assign, {moving, nv}, Attrs{{"aggregation", std::string("mean")}}, name(), var);
  }

  layers::BatchNormOptions o_;
  int64_t C_ = 0;
  VariablePtr gamma_, beta_, moving_mean_, moving_var_;
};

class LayerNormLayer : public Layer {
 public:
  bool autocasts_variables() const override { return false; }
  LayerNormLayer(layers::LayerNormOptions o, std::string name)
      : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(o_.axis == -1, "LayerNormalization '", this->name(),
             "': only axis=-1 is supported, got axis=", o_.axis);
    LS_CHECK(o_.epsilon > 0, "LayerNormalization '", this->name(),
             "': epsilon must be positive, got ", o_.epsilon);
  }
  std::string class_name() const override { return "LayerNormalization"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    return {{"axis", o_.axis},
            {"epsilon", o_.epsilon},
            {"center", o_.center},
            {"scale", o_.scale},
            {"rms_scaling", false},
            {"beta_initializer", initializer_json("zeros")},
            {"gamma_initializer", initializer_json("ones")},
            {"beta_regularizer", nullptr},
            {"gamma_regularizer", nullptr},
            {"beta_constraint", nullptr},
            {"gamma_constraint", nullptr}};
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 2, "expected input of rank >= 2, got ", s.str());
    LS_CHECK(o_.axis == -1 || o_.axis == s.rank() - 1, "BatchNormalization '", name(),
             "': only the last axis (channels_last) is supported, got axis=", o_.axis,
             " for input ", s.str());
    C_ = s[-1];
    LS_CHECK(C_ > 0, "the last dimension must be known, got ", s.str());
    if (o_.scale) gamma_ = add_weight("gamma", Shape{C_}, "ones");
    if (o_.center) beta_ = add_weight("beta", Shape{C_}, "zeros");
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value gamma = gamma_ ? ctx.read(gamma_) : layer_util::constant_vector(g, C_, 1.f);
    Value beta = beta_ ? ctx.read(beta_) : layer_util::constant_vector(g, C_, 0.f);
    auto outs = g.add_multi(op::layer_norm, {in.at(0), gamma, beta}, Attrs{{"epsilon", o_.epsilon}},
                            name());
    return {outs.at(0)};
  }

 private:
  layers::LayerNormOptions o_;
  int64_t C_ = 0;
  VariablePtr gamma_, beta_;
};

// keras.layers.GroupNormalization: x [N, ..., C] as [N, S, G, C/G] (S the spatial positions),
// each (sample, group) normalised by its mean and (biased) variance over S and C/G, then
// reshaped back and scaled/shifted per channel. Keras computes it in float32 under mixed
// precision and casts the result back to the compute dtype; so does this.
class GroupNormLayer : public Layer {
 public:
  bool autocasts_variables() const override { return false; }
  GroupNormLayer(layers::GroupNormOptions o, std::string name)
      : Layer(std::move(name)), o_(std::move(o)) {
    LS_CHECK(o_.groups > 0, "GroupNormalization '", this->name(),
             "': groups must be positive, got ", o_.groups);
    LS_CHECK(o_.axis == -1 || o_.axis > 0, "GroupNormalization '", this->name(),
             "': only the last axis (-1, or its index) is supported, got axis=", o_.axis);
    LS_CHECK(o_.epsilon > 0, "GroupNormalization '", this->name(),
             "': epsilon must be positive, got ", o_.epsilon);
    for (const std::string* i : {&o_.beta_initializer, &o_.gamma_initializer}) try {
        check_initializer(*i);
      } catch (const Error& e) {
        LS_FAIL("GroupNormalization '", this->name(), "': ", e.what());
      }
  }
  std::string class_name() const override { return "GroupNormalization"; }
  bool supports_masking() const override { return true; }  // Keras: passes the mask on
  json layer_config() const override {
    return {{"groups", o_.groups},
            {"axis", o_.axis},
            {"epsilon", o_.epsilon},
            {"center", o_.center},
            {"scale", o_.scale},
            {"beta_initializer", initializer_json(o_.beta_initializer)},
            {"gamma_initializer", initializer_json(o_.gamma_initializer)},
            {"beta_regularizer", nullptr},
            {"gamma_regularizer", nullptr},
            {"beta_constraint", nullptr},
            {"gamma_constraint", nullptr}};
  }
  void build(const std::vector<Shape>& in) override {
    const Shape& s = in.at(0);
    LS_CHECK(s.rank() >= 2, "GroupNormalization '", name(),
             "': expected an input of rank >= 2, got ", s.str());
    LS_CHECK(o_.axis == -1 || o_.axis == s.rank() - 1, "GroupNormalization '", name(),
             "': only the last axis (channels_last) is supported, got axis=", o_.axis,
             " for input ", s.str());
    C_ = s[-1];
    LS_CHECK(C_ > 0, "GroupNormalization '", name(), "': the channel axis must be known, got ",
             s.str());
    LS_CHECK(o_.groups <= C_ && C_ % o_.groups == 0, "GroupNormalization '", name(), "': groups (",
             o_.groups, ") must divide the number of channels (", C_, ") and be at most it");
    for (int i = 1; i + 1 < s.rank(); ++i)
      LS_CHECK(s[i] > 0, "GroupNormalization '", name(),
               "': the axes between the batch and the channels must be known, got ", s.str());
    if (o_.scale) gamma_ = add_weight("gamma", Shape{C_}, o_.gamma_initializer);
    if (o_.center) beta_ = add_weight("beta", Shape{C_}, o_.beta_initializer);
  }
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override {
    Graph& g = ctx.graph;
    Value x = in.at(0);
    const TensorType t = g.type(x);
    const DType out_dtype = t.dtype;
    if (t.dtype != DType::f32) x = g.add(op::cast, {x}, Attrs{{"dtype", std::string("float32")}});
    const Shape& s = t.shape;
    int64_t spatial = 1;
    for (int i = 1; i + 1 < s.rank(); ++i) spatial *= s[i];
    const int64_t G = o_.groups;
    const Attrs moments{{"axes", std::vector<int64_t>{1, 3}}, {"keepdims", true}};
    Value xr =
        g.add(op::reshape, {x}, Attrs{{"shape", std::vector<int64_t>{-1, spatial, G, C_ / G}}});
    Value mean = g.add(op::reduce_mean, {xr}, moments);
    Value xc = g.add(op::sub, {xr, mean});
    Value var = g.add(op::reduce_mean, {g.add(op::square, {xc})}, moments);
    Value sd = g.add(op::sqrt,
                     {g.add(op::scale_shift, {var}, Attrs{{"scale", 1.0}, {"shift", o_.epsilon}})});
    std::vector<int64_t> back = s.vec();
    back[0] = -1;
    // The layer's name goes on its last node.
    const bool cast_back = out_dtype != DType::f32;
    auto named = [&](bool last) { return last ? name() : std::string(); };
    Value y = g.add(op::reshape, {g.add(op::div, {xc, sd})}, Attrs{{"shape", back}},
                    named(!gamma_ && !beta_ && !cast_back));
    if (gamma_) y = g.add(op::mul, {y, ctx.read(gamma_)}, {}, named(!beta_ && !cast_back));
    if (beta_) y = g.add(op::add, {y, ctx.read(beta_)}, {}, named(!cast_back));
    if (cast_back)
      y = g.add(op::cast, {y}, Attrs{{"dtype", std::string(dtype_name(out_dtype))}}, name());
    return {y};
  }

 private:
  layers::GroupNormOptions o_;
  int64_t C_ = 0;
  VariablePtr gamma_, beta_;
};

}  // namespace

namespace layers {

LayerHandle BatchNormalization(BatchNormOptions o) {
  std::string n = layer_util::default_name(o.name, "batch_normalization");
  return LayerPtr(std::make_shared<BatchNormLayer>(std::move(o), n));
}

LayerHandle LayerNormalization(LayerNormOptions o) {
  std::string n = layer_util::default_name(o.name, "layer_normalization");
  return LayerPtr(std::make_shared<LayerNormLayer>(std::move(o), n));
}

LayerHandle GroupNormalization(GroupNormOptions o) {
  std::string n = layer_util::default_name(o.name, "group_normalization");
  return LayerPtr(std::make_shared<GroupNormLayer>(std::move(o), n));
}

}  // namespace layers
}  // namespace lockstep
