// Keras initializers by name: glorot_uniform (default), glorot_normal, he_normal, he_uniform,
// lecun_normal, lecun_uniform, zeros, ones, random_normal, random_uniform, constant:<v>.
#pragma once
#include <string>

#include "lockstep/core/tensor.h"

namespace lockstep {

// Fills `t` per the named initializer. Fans follow Keras: for a conv kernel
// [kh, kw, in, out] fan_in = kh*kw*in, fan_out = kh*kw*out; for [in, out], in and out.
void initialize(Tensor& t, const std::string& initializer, uint64_t seed);

}  // namespace lockstep
