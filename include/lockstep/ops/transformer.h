// Graph builders for transformer models: einsum, a masked softmax, and the rms_norm,
// rotary_embedding and random_categorical ops with their attributes spelled out. Each adds
// nodes to `g` (a layer's call() passes ctx.graph) and returns the result; `name` names the
// nodes (a layer passes its own name, so errors and profiles name the layer).
//   Value scores = ops::einsum(g, "bqhd,bkhd->bhqk", q, k);
//   Value w = ops::masked_softmax(g, scores, mask, {-1});
#pragma once
#include <string>
#include <vector>

#include "lockstep/graph/graph.h"

namespace lockstep::ops {

/// numpy.einsum of one or two operands: "abc->acb", "btd,dhk->bthk", "bqhd,bkhd->bhqk",
/// "...ij,...jk->...ik". Lowered to transpose / reshape / batch_matmul (matmul without batch
/// letters) / reduce_sum: letters in both operands and the output are batch dims, in both but
/// not the output are summed (contracted), in one operand only and not the output are summed
/// first. Without "->" the output is numpy's implicit one ("..." then the letters used once,
/// sorted). An ellipsis stands for the same broadcast dims in every term. Refused with an error
/// naming the equation: a letter repeated within one operand (a diagonal), an output letter
/// no operand has, two sizes of one letter (other than 1 against n inside "..."), more than two
/// operands. Float32 or bfloat16 operands (bfloat16 products accumulate in float32).
Value einsum(Graph& g, const std::string& equation, Value a, Value b = Value{},
             const std::string& name = "");

/// The output shape of einsum(equation, a, b) for operands of shapes `a` and `b` (b empty for
/// one operand), with the same checks and errors; a layer validates its configuration with it.
Shape einsum_shape(const std::string& equation, const Shape& a, const Shape& b = Shape{});

/// keras.layers.Softmax with a mask: softmax over `axes` (one or more, negative from the end)
/// where mask (broadcastable to x, nonzero / > 0.5 = keep) is false gets -1e9 before the softmax
/// and 0 after it, exactly as Keras (so a fully masked row is all zeros). mask invalid: the
/// plain softmax. Float32 (the caller casts bf16 first: Keras computes softmax in float32).
Value masked_softmax(Graph& g, Value x, Value mask, std::vector<int64_t> axes = {-1},
                     const std::string& name = "");

/// keras.ops.rms_normalization over the last axis: x * rsqrt(mean(x^2) + epsilon) * scale;
/// scale [C] (C = x's last dim). The rms_norm op (with its gradient).
Value rms_norm(Graph& g, Value x, Value scale, double epsilon = 1e-6, const std::string& name = "");

/// KerasHub's RotaryEmbedding (keras_hub.layers.RotaryEmbedding) arguments.
struct RotaryOptions {
  double max_wavelength = 10000;  ///< the longest wavelength
  double scaling_factor = 1.0;    ///< positions are divided by it
  int64_t sequence_axis = 1;      ///< the positions' axis
  int64_t feature_axis = -1;      ///< the rotated features' axis (even size)
  int64_t start_index = 0;        ///< the first position (a constant offset)
};
/// The rotary position embedding of x (rotate-half: features d and d + D/2 rotate together).
/// start_index, when valid, is one int32 or float32 value added to opts.start_index (a key /
/// value cache's position at generation time); it takes no gradient.
Value rotary_embedding(Graph& g, Value x, const RotaryOptions& opts = {},
                       Value start_index = Value{}, const std::string& name = "");

/// One class id (int32) per row of logits [B, V], sampled from softmax(logits / temperature)
/// among the top_k largest (0: all). Deterministic for a fixed seed and step (Philox, keyed as
/// dropout). No gradient.
Value random_categorical(Graph& g, Value logits, uint64_t seed = 0, double temperature = 1.0,
                         int64_t top_k = 0, const std::string& name = "");

}  // namespace lockstep::ops
