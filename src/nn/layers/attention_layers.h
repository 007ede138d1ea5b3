// The attention layers' classes (src/nn/layers/attention.cpp), for their config and file hooks
// (attention_config.cpp).
#pragma once
#include <string>
#include <vector>

#include "lockstep/nn/attention.h"
#include "lockstep/nn/config.h"

namespace lockstep {

/// Which inputs a call passes besides query and value, and its options (Keras's call keywords).
/// Set once (attend() or the config's call node); a later call must match.
struct AttentionCallRoles {
  bool has_key = false, has_mask = false, causal = false, scores = false;
  bool called = false;
  void set(const AttentionCallRoles& o, const std::string& layer);
};

namespace attention_impl {
struct MaskParts {
  Value attention_mask, query, value, key;
};
struct CoreOptions {
  bool causal = false, scores = false;
  double scale = 0, dropout = 0;
  uint64_t seed = 0;
};
Value as_f32(Graph& g, Value v);
// x (B, T, in) times kernel (in, out...) [+ bias (out...)] -> (B, T, out...).
Value dense_last(Graph& g, Value x, Value kernel, Value bias, const std::vector<int64_t>& out,
                 const std::string& name);
Value combined_mask(CallContext& ctx, const MaskParts& p, int64_t T, int64_t S,
                    const std::string& name);
std::vector<Value> attention_core(CallContext& ctx, Value q, Value k, Value v, Value mask,
                                  const CoreOptions& o, const std::string& name);
}  // namespace attention_impl

/// MultiHeadAttention and GroupQueryAttention (heads over kv_heads key/value heads).
class MultiHeadAttentionLayer : public Layer {
 public:
  enum class Kind { mha, gqa };
  MultiHeadAttentionLayer(Kind kind, int64_t heads, int64_t kv_heads, int64_t key_dim,
                          int64_t value_dim, layers::MultiHeadAttentionOptions o, std::string name);
  std::string class_name() const override;
  bool supports_masking() const override { return true; }
  json layer_config() const override;
  void build(const std::vector<Shape>& in) override;
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override;
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& inputs,
                                  const std::vector<Value>& masks, int num_outputs) override;
  void set_roles(const AttentionCallRoles& r) { roles_.set(r, name()); }
  const AttentionCallRoles& roles() const { return roles_; }
  Kind kind() const { return kind_; }
  layers::AttentionCallInfo info() const;
  std::vector<KerasWeightSlot> weight_slots(const LayerPtr& self, const std::string& path) const;

 private:
  struct Proj {
    VariablePtr kernel, bias;
  };
  void check_inputs(const std::vector<Shape>& in) const;
  Kind kind_;
  int64_t heads_, kv_heads_, key_dim_, value_dim_;
  layers::MultiHeadAttentionOptions o_;
  AttentionCallRoles roles_;
  Proj q_, k_, v_, out_;
  std::vector<int64_t> out_shape_;
};

/// Attention (Keras's dot-product attention layer).
class DotAttentionLayer : public Layer {
 public:
  DotAttentionLayer(layers::AttentionOptions o, std::string name);
  std::string class_name() const override { return "Attention"; }
  bool supports_masking() const override { return true; }
  json layer_config() const override;
  void build(const std::vector<Shape>& in) override;
  std::vector<Value> call(CallContext& ctx, const std::vector<Value>& in) override;
  std::vector<Value> compute_mask(CallContext& ctx, const std::vector<Value>& inputs,
                                  const std::vector<Value>& masks, int num_outputs) override;
  void set_roles(const AttentionCallRoles& r) { roles_.set(r, name()); }
  const AttentionCallRoles& roles() const { return roles_; }
  layers::AttentionCallInfo info() const;

 private:
  layers::AttentionOptions o_;
  AttentionCallRoles roles_;
  VariablePtr scale_;
};

}  // namespace lockstep
