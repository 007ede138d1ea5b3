// Keras initializers by name: glorot_uniform (default), glorot_normal, he_normal, he_uniform,
// lecun_normal, lecun_uniform, zeros, ones, random_normal, random_uniform, constant:<v>.
#pragma once
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep {

/// Fills `t` per the named initializer. Fans follow Keras: for a conv kernel
/// [kh, kw, in, out] fan_in = kh*kw*in, fan_out = kh*kw*out; for [in, out], in and out.
void initialize(Tensor& t, const std::string& initializer, uint64_t seed);

/// Throws lockstep::Error listing the valid names when `initializer` is unknown.
void check_initializer(const std::string& initializer);
/// Fans per the Keras rule above (rank 0: 1, 1; rank 1: n, n).
void compute_fans(const Shape& shape, double* fan_in, double* fan_out);

}  // namespace lockstep
