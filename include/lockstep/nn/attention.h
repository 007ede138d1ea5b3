// Keras's attention layers: MultiHeadAttention, GroupQueryAttention and Attention (dot-product),
// with Keras 3's configs and weight layouts. Their core is the fused op
// scaled_dot_product_attention (a tiled, linear-memory kernel on cpu).
//
// Keras passes query, value, key and attention_mask as call arguments; here a layer is called on
// a list of tensors whose roles its call options name:
//   auto mha = layers::MultiHeadAttention(4, 16);
//   KTensor y = layers::attend(mha, query, value, {.use_causal_mask = true});
// which is Keras's `mha(query, value, use_causal_mask=True)`.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lockstep/nn/layer.h"

namespace lockstep::layers {

/// MultiHeadAttention's options (keras.layers.MultiHeadAttention's keyword arguments).
struct MultiHeadAttentionOptions {
  int64_t value_dim = 0;              ///< 0: key_dim
  double dropout = 0.0;               ///< on the attention weights, in training
  bool use_bias = true;               ///< biases on the four projections
  std::vector<int64_t> output_shape;  ///< {}: the query's last dimension
  /// The attention axes: {} (Keras's None) or {1}, the time axis of (batch, time, features).
  std::vector<int64_t> attention_axes;
  std::string kernel_initializer = "glorot_uniform";  ///< the projections' kernels
  std::string bias_initializer = "zeros";             ///< their biases
  std::optional<int64_t> seed;                        ///< the dropout's seed
  std::string name;                                   ///< "" = "multi_head_attention", ...
};
/// keras.layers.MultiHeadAttention: query (B, T, dq), value (B, S, dv)[, key (B, S, dk)] ->
/// (B, T, output_shape or dq); weights query/key/value kernels (d, num_heads, key_dim or
/// value_dim) with biases (num_heads, dim), output kernel (num_heads, value_dim, d_out) and
/// bias (d_out), in Keras's order and file layout.
LayerHandle MultiHeadAttention(int64_t num_heads, int64_t key_dim,
                               MultiHeadAttentionOptions o = {});

/// GroupQueryAttention's options (keras.layers.GroupQueryAttention's keyword arguments).
struct GroupQueryAttentionOptions {
  double dropout = 0.0;                               ///< on the attention weights, in training
  bool use_bias = true;                               ///< biases on the four projections
  std::string kernel_initializer = "glorot_uniform";  ///< the projections' kernels
  std::string bias_initializer = "zeros";             ///< their biases
  std::optional<int64_t> seed;                        ///< the dropout's seed
  std::string name;                                   ///< "" = "grouped_query_attention", ...
};
/// keras.layers.GroupQueryAttention: num_query_heads query heads over num_key_value_heads
/// key/value heads (which must divide them), each head_dim wide; output (B, T, query's d).
LayerHandle GroupQueryAttention(int64_t head_dim, int64_t num_query_heads,
                                int64_t num_key_value_heads, GroupQueryAttentionOptions o = {});

/// Attention's options (keras.layers.Attention).
struct AttentionOptions {
  bool use_scale = false;          ///< a learnable scalar multiplies the scores
  std::string score_mode = "dot";  ///< "dot" (Lockstep has only the dot product)
  double dropout = 0.0;            ///< on the attention weights, in training
  std::optional<int64_t> seed;     ///< the dropout's seed
  std::string name;                ///< "" = "attention", ...
};
/// keras.layers.Attention (Luong dot-product attention): inputs [query (B, T, d), value (B, S,
/// d)[, key (B, S, d)]] -> (B, T, d); Keras masks of query and value apply as Keras's do.
LayerHandle Attention(AttentionOptions o = {});

/// The call arguments of the attention layers (Keras's call keywords).
struct AttendOptions {
  std::optional<KTensor> key;             ///< default: value
  std::optional<KTensor> attention_mask;  ///< (B, T, S), nonzero = attend
  bool use_causal_mask = false;           ///< query t sees keys s <= t
  /// Also return the weights (B, heads, T, S) as a second output (computed in full).
  bool return_attention_scores = false;
};
/// Calls an attention layer: Keras's `layer(query, value, key=..., attention_mask=...,
/// use_causal_mask=..., return_attention_scores=...)` (Attention: `layer([query, value, key],
/// ...)`; it takes no attention_mask). One output, or (output, scores).
KTensors attend(const LayerHandle& layer, const KTensor& query, const KTensor& value,
                AttendOptions o = {});

/// What an attention layer was built and called with (for exporters): its heads and sizes and
/// its call options. nullopt for a layer that is not MultiHeadAttention, GroupQueryAttention or
/// Attention (Attention: one head, key_dim = value_dim = the features).
struct AttentionCallInfo {
  int64_t num_heads = 1;     ///< query heads
  int64_t num_kv_heads = 1;  ///< key/value heads (dividing num_heads)
  int64_t key_dim = 0;       ///< the query/key head size
  int64_t value_dim = 0;     ///< the value head size
  bool has_key = false;      ///< called with a key of its own (else the value)
  bool has_mask = false;     ///< called with an attention_mask input (the last input)
  bool causal = false;       ///< use_causal_mask
  bool scores = false;       ///< return_attention_scores
  double scale = 0;          ///< the logits' factor (Attention: 1, times its scale weight if any)
};
/// The AttentionCallInfo of `layer`; nullopt when it is no attention layer.
std::optional<AttentionCallInfo> attention_call_info(const Layer& layer);

}  // namespace lockstep::layers
