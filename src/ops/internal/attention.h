// The geometry of a scaled_dot_product_attention node (shared by its declaration, its kernels and
// its lowerings): q (B, Tq, H, D), k (B, Tk, Hkv, D), v (B, Tk, Hkv, Dv), an optional keep-mask
// broadcastable to (B, H, Tq, Tk), and the attention-weight dropout's Philox draws.
#pragma once
#include <cmath>
#include <cstdint>

#include "lockstep/core/rng.h"
#include "lockstep/graph/op_registry.h"
#include "ops/internal/kernel_math.h"

namespace lockstep::ops {

// The logit a masked-out (query, key) pair gets: Keras's large negative number for float32
// (so a row with every key masked attends uniformly to all of them, as Keras's softmax does).
inline constexpr float kAttentionMasked = -1e9f;

struct AttentionGeom {
  int64_t B = 0, Tq = 0, Tk = 0, H = 0, Hkv = 0, D = 0, Dv = 0;
  bool causal = false, masked = false;
  float scale = 1.f;
  double dropout = 0;
  // The mask's element strides along (B, H, Tq, Tk): 0 where it broadcasts.
  int64_t ms[4] = {0, 0, 0, 0};
  int64_t group() const { return H / Hkv; }  // query heads per key/value head
  // Offsets of row (b, t, head) in q / y (head dim D or Dv), and in k / v.
  int64_t q_off(int64_t b, int64_t t, int64_t h, int64_t d) const {
    return ((b * Tq + t) * H + h) * d;
  }
  int64_t kv_off(int64_t b, int64_t t, int64_t h, int64_t d) const {
    return ((b * Tk + t) * Hkv + h) * d;
  }
  // Whether key j is visible from query i by the causal rule (top-left aligned, Keras's).
  bool visible(int64_t i, int64_t j) const { return !causal || j <= i; }
  int64_t mask_off(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3];
  }
};

// The geometry from the node's attributes and its input shapes (in: q, k, v[, mask], from
// index `first`); an error naming the operand on bad shapes. Validates, so the shape functions
// call it too.
AttentionGeom attention_geom(const Node& n, const std::vector<TensorType>& in, size_t first);

// The Philox key of the node's dropout draws: its "seed" attribute (not the node id, so the
// gradient node draws the same masks), the replica and the model seed, as dropout's keying.
inline uint64_t attention_dropout_key(const Node& n, const StepInfo* s) {
  using namespace ew;
  return dropout_key(splitmix64(splitmix64(uint64_t(attr_i(n, "seed"))) ^ 0xA77E4710Du), s);
}

// The dropout draws of one row (b, h, i) of the weights: element e = ((h * Tq + i) * Tk + j)
// of sample b is kept when word e % 4 of Philox(key, (step, base(b) + e / 4)) as a unit float is
// >= rate, where base(b) = b * (H * Tq * Tk / 4) normally (elements numbered over (B, H, Tq,
// Tk), as dropout numbers a (B, H, Tq, Tk) tensor when H * Tq * Tk is a multiple of 4), or
// (first_row + b) << 32 keyed by row. Writes keep factors (0 or 1 / (1 - rate)) for j in [j0,
// j1).
struct AttentionDropout {
  uint64_t key = 0, step = 0, first = 0;
  bool keyed = false;
  float rate = 0, keep_scale = 1;
  AttentionDropout(const Node& n, const AttentionGeom& g, const StepInfo* s)
      : key(attention_dropout_key(n, s)),
        step(s ? s->step : 0),
        first(ew::first_index(s)),
        keyed(ew::keyed_by_row(s)),
        rate(float(g.dropout)),
        keep_scale(float(1.0 / (1.0 - g.dropout))) {}
  void row(const AttentionGeom& g, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t j1,
           float* keep) const {
    const uint64_t per_sample = uint64_t(g.H * g.Tq * g.Tk);
    const uint64_t e0 = uint64_t((h * g.Tq + i) * g.Tk);
    const uint64_t flat0 = keyed ? e0 : uint64_t(b) * per_sample + e0;
    const uint64_t base = keyed ? (first + uint64_t(b)) << 32 : 0;
    int64_t j = j0;
    while (j < j1) {
      const uint64_t e = flat0 + uint64_t(j);
      auto r = philox4x32(key, step, base + e / 4);
      for (uint64_t w = e % 4; w < 4 && j < j1; ++w, ++j)
        keep[j - j0] = uint_to_unit_float(r[w]) >= rate ? keep_scale : 0.f;
    }
  }
};

}  // namespace lockstep::ops
