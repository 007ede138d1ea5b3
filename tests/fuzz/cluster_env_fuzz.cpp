// Fuzzes the environment resolvers: the input is NAME=VALUE lines (TF_CONFIG, the MPI and
// Slurm variables, LOCKSTEP_MASTER_ADDR/PORT ...), given to from_environment (which picks a
// resolver), from_mpi_environment and from_slurm_environment; what resolves is validated.
#include "fuzz_util.h"
#include "lockstep/distribute/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lockstep::distribute::ClusterResolver;
  lockstep::distribute::Environment env;
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    begin = end + 1;
  }
  auto check = [](const ClusterResolver& resolver) {
    resolver.validate();
    resolver.describe();
  };
  lockstep::fuzz::expect_clean([&] { check(ClusterResolver::from_environment(env)); });
  lockstep::fuzz::expect_clean([&] { check(ClusterResolver::from_mpi_environment(env)); });
  lockstep::fuzz::expect_clean([&] { check(ClusterResolver::from_slurm_environment(env)); });
  return 0;
}
