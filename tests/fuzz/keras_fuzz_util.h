// The Keras targets' input filter. A config asking for a 100000-unit Dense on a 100000-wide input
// is a valid (huge) model, not a bug: it would allocate gigabytes and trip libFuzzer's memory
// limit on every such input. The targets skip configs with any number above kMaxConfigNumber so
// that the fuzzer spends its time on structure; negative and zero sizes still go through.
#pragma once
#include <string>

#include "fuzz_util.h"
#include "lockstep/core/json.h"

namespace lockstep::fuzz {

inline constexpr double kMaxConfigNumber = 512;

inline bool small_numbers(const json& j) {
  if (j.is_number()) return !(j.get<double>() > kMaxConfigNumber);
  if (j.is_array() || j.is_object())
    for (auto& x : j)
      if (!small_numbers(x)) return false;
  return true;
}

// True when `text` is not JSON (the parser's errors are fuzzed too) or has only small numbers.
inline bool small_model_config(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() || small_numbers(j);
}

}  // namespace lockstep::fuzz
