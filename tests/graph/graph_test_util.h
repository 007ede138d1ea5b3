// Helpers of the graph tests: feed float inputs to a compiled program, run one step, read back
// every output; pin the conv algorithm for a test.
#pragma once
#include <algorithm>
#include <vector>

#include "lockstep/core/config.h"
#include "lockstep/graph/executable.h"

namespace lockstep::test_util {

// Sets the process-wide conv algorithm and restores it whatever the test does.
struct AlgorithmGuard {
  config::ConvAlgorithm saved = config::conv_algorithm();
  explicit AlgorithmGuard(config::ConvAlgorithm a) { config::set_conv_algorithm(a); }
  ~AlgorithmGuard() { config::set_conv_algorithm(saved); }
};

inline std::vector<std::vector<float>> run_once(Executable& exe,
                                                const std::vector<std::vector<float>>& in) {
  for (int i = 0; i < exe.num_inputs(); ++i)
    std::copy(in[size_t(i)].begin(), in[size_t(i)].end(), exe.input(i).data<float>());
  exe.run();
  std::vector<std::vector<float>> out;
  for (int k = 0; k < exe.num_outputs(); ++k) out.push_back(exe.output(k).to_vector());
  return out;
}

}  // namespace lockstep::test_util
