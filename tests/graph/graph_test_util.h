// Helpers of the graph tests: feed float inputs to a compiled program, run one step, read back
// every output; pin the conv algorithm for a test; compare two results.
#pragma once
#include <algorithm>
#include <cmath>
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

// Largest |a - b| / (atol + rtol * max|b|) over the tensor: <= 1 passes.
inline double worst(const std::vector<float>& a, const std::vector<float>& b, double atol,
                    double rtol) {
  double scale = 0, err = 0;
  for (float v : b) scale = std::max(scale, double(std::fabs(v)));
  for (size_t i = 0; i < a.size(); ++i)
    err = std::max(err, std::fabs(double(a[i]) - b[i]) / (atol + rtol * scale));
  return err;
}

}  // namespace lockstep::test_util
