// Counter-based RNG (Philox4x32-10): the numbers depend only on (key, counter), so any replica
// count, thread count or evaluation order yields the same stream.
#pragma once
#include <array>
#include <cstdint>

namespace lockstep {

/// One Philox4x32-10 block: four uniform 32-bit words for (key, 128-bit counter).
std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter_hi, uint64_t counter_lo);

/// Uniform float in [0, 1) for element `index` of stream (key, stream).
inline float uint_to_unit_float(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }

/// A stream of random numbers from Philox4x32-10, keyed by (seed, stream): the same seed and
/// stream give the same numbers on every machine and thread count.
class Philox {
 public:
  /// The stream `stream` (default 0) of generator `seed`.
  explicit Philox(uint64_t seed, uint64_t stream = 0) : key_(seed), stream_(stream) {}
  uint32_t next_u32();                ///< the next uniform 32-bit word
  float uniform();                    ///< [0, 1)
  float uniform(float lo, float hi);  ///< [lo, hi)
  float normal();                     ///< standard normal (Box-Muller)
  float truncated_normal();           ///< normal, redrawn outside 2 stddev (Keras)
  /// The next uniform 64-bit word (two 32-bit words, high first).
  uint64_t next_u64() { return (uint64_t(next_u32()) << 32) | next_u32(); }

 private:
  uint64_t key_, stream_, counter_ = 0;
  std::array<uint32_t, 4> buf_{};
  int pos_ = 4;
};

}  // namespace lockstep
