// Helpers of the graph tests: feed float inputs to a compiled program, run one step, read back
// every output.
#pragma once
#include <algorithm>
#include <vector>

#include "lockstep/graph/executable.h"

namespace lockstep::test_util {

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
