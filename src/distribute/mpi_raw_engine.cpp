// Raw MPI all-reduce timing for the benchmark: MPI_Allreduce called directly.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>

#include "distribute/raw_engine.h"

namespace lockstep::distribute::detail {

void ensure_mpi_initialized();  // mpi_communicator.cpp

std::vector<double> raw_mpi_allreduce_seconds(float* data, size_t count, int warmup,
                                              int iterations) {
  ensure_mpi_initialized();
  for (int i = 0; i < warmup; ++i) {
    MPI_Allreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  std::vector<double> seconds;
  for (int i = 0; i < iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    MPI_Allreduce(MPI_IN_PLACE, data, int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

}  // namespace lockstep::distribute::detail
