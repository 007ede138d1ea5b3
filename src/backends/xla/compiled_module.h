// What the compiler made of a partitioned program, read back from the plugin
// (PjrtExecutable::optimized_program: the optimized module as a serialized HloModuleProto): the
// sharding XLA's SPMD partitioner settled on for each argument and result of the entry
// computation (HloModuleProto's spmd_parameters_shardings and spmd_output_sharding, what JAX's
// executable.input_shardings / output_shardings read), and the collectives the partitioned
// program runs. The proto is read with a small wire-format reader (no protobuf dependency): only
// the fields named here are decoded, the rest skipped.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lockstep/graph/sharding.h"

namespace lockstep::xla {

struct CompiledModule {
  bool read = false;  // the plugin offered the program and it parsed
  std::string format;
  // GSPMD text per entry parameter / result ("{devices=[1,2,2]0,2,1,3
  // last_tile_dim_replicate}", "{replicated}"); empty when the module does not record them.
  std::vector<std::string> parameter_shardings, result_shardings;
  // Collective ops of the partitioned program (all computations), by HLO opcode: "all-reduce",
  // "all-gather", "reduce-scatter", "all-to-all", "collective-permute" (and their -start forms).
  std::map<std::string, int> collectives;
  int instructions = 0;
};

// Parses `bytes` of `format` ("hlo" or "hlo_with_config"); read = false when it does not parse.
CompiledModule read_compiled_module(const std::string& bytes, const std::string& format);

// The layout (per dim, a mesh axis or "") whose GSPMD text on `mesh` is `sharding`, for a tensor
// of rank `rank`; nullopt when none is (a sharding the mesh's axes cannot name).
std::optional<DimAxes> layout_of_sharding(const std::string& sharding, const MeshShape& mesh,
                                          int rank);

}  // namespace lockstep::xla
