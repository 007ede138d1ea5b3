// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3").
#include "lockstep/core/rng.h"

#include <cmath>

namespace lockstep {

std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo) {
  uint32_t c0 = uint32_t(counter_lo), c1 = uint32_t(counter_lo >> 32);
  uint32_t c2 = uint32_t(counter_hi), c3 = uint32_t(counter_hi >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

uint32_t Philox::next_u32() {
  if (pos_ == 4) {
    buf_ = philox4x32(key_, stream_, counter_++);
    pos_ = 0;
  }
  return buf_[pos_++];
}

float Philox::uniform() { return uint_to_unit_float(next_u32()); }
float Philox::uniform(float lo, float hi) { return lo + (hi - lo) * uniform(); }

float Philox::normal() {
  float u1 = uniform(), u2 = uniform();
  if (u1 < 1e-12f) u1 = 1e-12f;
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530718f * u2);
}

float Philox::truncated_normal() {
  for (;;) {
    float z = normal();
    if (std::fabs(z) <= 2.0f) return z;
  }
}

}  // namespace lockstep
