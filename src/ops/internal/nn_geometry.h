// Conv/pool geometry from attrs and shapes (Keras "same"/"valid" padding), shared by the
// nn op registrations and the reference and cpu kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/core/shape.h"
#include "lockstep/graph/fused_activation.h"
#include "lockstep/graph/graph.h"

namespace lockstep::ops {

struct ConvGeom {
  int64_t N = 0, H = 0, W = 0, C = 0;  // input (NHWC)
  int64_t KH = 0, KW = 0, O = 0;       // filter [KH, KW, C/G, O]
  int64_t G = 1;                       // groups
  int64_t SH = 1, SW = 1, DH = 1, DW = 1;
  int64_t PT = 0, PB = 0, PL = 0, PR = 0;
  int64_t OH = 0, OW = 0;  // output (-1 when the input dim is unknown)
  bool fused_bias = false;
  FusedActivation act = FusedActivation::linear;  // conv2d's "activation", applied last
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
  double flops() const { return 2.0 * N * OH * OW * O * KH * KW * Cg(); }
};

// Geometry of a conv node (conv2d, conv2d_backward_input/_filter) for x [N,H,W,C] and filter
// [KH,KW,C/G,O] under its attrs strides, padding | pads, dilations and groups (defaults from
// the op's declaration). Validates and throws lockstep::Error naming the problem. Unknown (-1)
// N/H/W propagate to the outputs.
ConvGeom conv_geometry(const Shape& x, const Shape& w, const Node& n);

// conv2d's geometry: conv_geometry plus its fusion attrs fused_bias and activation.
ConvGeom conv2d_geometry(const Shape& x, const Shape& w, const Node& n);

// conv2d_pointwise_depthwise's two convolutions (x [N,H,W,C], w [1,1,C,M], wd [kh,kw,1,M]): pw,
// the 1x1 conv2d (fused bias, the node's activation), and dw, the depthwise conv2d on pw's
// output (fused bias, dw_activation, dw_strides, dw_pads, groups M), each the geometry a conv2d
// node with those attributes would have. Throws naming the problem when w is not 1x1 or wd not
// depthwise over pw's M channels.
struct PointwiseDepthwise {
  ConvGeom pw, dw;
};
PointwiseDepthwise pointwise_depthwise_geometry(const Shape& x, const Shape& w, const Shape& wd,
                                                const Node& n);

// Geometry of a pool node for x: O = C, G = C, filter pool_size; strides default to pool_size.
ConvGeom pool_geometry(const Shape& x, const Node& n);

// The x shape of a gradient op that gets it as attr `input_shape` (conv2d_backward_input,
// avg_pool2d_grad), with dim 0 set to `batch` (dy's, which may differ from the traced one).
Shape input_shape_attr(const Node& n, int64_t batch);

// The one pool-gradient geometry: avg_pool2d_grad's (x from input_shape, dy's batch); the
// max_pool2d_grad node reads x's shape from its input, pool_geometry(x, n).
ConvGeom pool_grad_geometry(const Node& n, const Shape& dy);

// The valid input rows [h0, h1) and columns [w0, w1) of the window under pool output (oh, ow):
// the window clipped to the image, so padding never counts (Keras's average). Every pool
// kernel of every backend walks windows through this.
struct PoolWindow {
  int64_t h0, h1, w0, w1;
  int64_t size() const { return (h1 - h0) * (w1 - w0); }
};
inline PoolWindow pool_window(const ConvGeom& g, int64_t oh, int64_t ow) {
  const int64_t h = oh * g.SH - g.PT, w = ow * g.SW - g.PL;
  return {h < 0 ? 0 : h, h + g.KH < g.H ? h + g.KH : g.H, w < 0 ? 0 : w,
          w + g.KW < g.W ? w + g.KW : g.W};
}

// Output length and leading pad for one spatial axis (Keras rules). in may be -1.
void axis_geometry(int64_t in, int64_t k, int64_t stride, int64_t dil, const std::string& padding,
                   int64_t* out, int64_t* pad_lo, int64_t* pad_hi);

// upsample2d's 1-D interpolation: output j of n input pixels enlarged s times reads inputs i0
// and i1 with weights w0 and w1. nearest: i0 = i1 = j / s, w1 = 0. bilinear: half-pixel centres
// c = (j + 0.5) / s - 0.5 clamped to [0, n - 1] (jax.image.resize's, so Keras's). Every backend's
// kernel and lowering takes its weights from here.
struct UpsampleTap {
  int64_t i0, i1;
  float w0, w1;
};
inline UpsampleTap upsample_tap(int64_t n, int64_t s, bool bilinear, int64_t j) {
  if (!bilinear) return {j / s, j / s, 1.f, 0.f};
  double c = (double(j) + 0.5) / double(s) - 0.5;
  if (c < 0) c = 0;
  int64_t a = int64_t(c);
  if (a > n - 1) a = n - 1;
  const float f = float(c - double(a));
  return {a, a + 1 < n ? a + 1 : n - 1, 1.f - f, f};
}

// Reads a 2-element int list attr that may also be given as one int or a 1-element list;
// absent: the op's declared default.
std::vector<int64_t> pair_attr(const Node& n, const std::string& key);

}  // namespace lockstep::ops
