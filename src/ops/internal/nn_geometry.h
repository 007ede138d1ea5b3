// Conv/pool geometry from attrs and shapes (Keras "same"/"valid" padding), shared by the
// nn op registrations and the reference and cpu kernels.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/graph/attrs.h"
#include "lockstep/core/shape.h"

namespace lockstep::ops {

struct ConvGeom {
  int64_t N = 0, H = 0, W = 0, C = 0;  // input (NHWC)
  int64_t KH = 0, KW = 0, O = 0;       // filter [KH, KW, C/G, O]
  int64_t G = 1;                       // groups
  int64_t SH = 1, SW = 1, DH = 1, DW = 1;
  int64_t PT = 0, PB = 0, PL = 0, PR = 0;
  int64_t OH = 0, OW = 0;              // output (-1 when the input dim is unknown)
  bool fused_bias = false, relu = false;
  int64_t Cg() const { return C / G; }
  int64_t Og() const { return O / G; }
  double flops() const { return 2.0 * N * OH * OW * O * KH * KW * Cg(); }
};

// Conv geometry for x [N,H,W,C] and filter [KH,KW,C/G,O] under the conv2d attrs
// (strides, padding|pads, dilations, groups, fused_bias, activation). Validates and throws
// lockstep::Error naming the problem. Unknown (-1) N/H/W propagate to the outputs.
ConvGeom conv_geometry(const Shape& x, const Shape& w, const Attrs& a);

// Pool geometry: O = C, G = C, filter pool_size; strides default to pool_size.
ConvGeom pool_geometry(const Shape& x, const Attrs& a);

// Output length and leading pad for one spatial axis (Keras rules). in may be -1.
void axis_geometry(int64_t in, int64_t k, int64_t stride, int64_t dil, const std::string& padding,
                   int64_t* out, int64_t* pad_lo, int64_t* pad_hi);

// A boolean attr that may also be stored as an int (Attrs::set(key, true) picks the int
// overload, as the fusion pass's fused_bias does).
bool flag_attr(const Attrs& a, const std::string& key);

// Reads a 2-element int list attr that may also be given as one int or a 1-element list.
std::vector<int64_t> pair_attr(const Attrs& a, const std::string& key, std::vector<int64_t> dflt);

}  // namespace lockstep::ops
