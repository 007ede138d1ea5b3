// Internal, for bench/allreduce_bench.cpp: time the collective engines' own all-reduce calls
// directly (no Lockstep Communicator in between), to compare against the Communicator.
#pragma once
#include <vector>

#include "lockstep/distribute/collective.h"

namespace lockstep::distribute::detail {

// Connects like connect() (Gloo), then times `iterations` runs of one Gloo algorithm object
// (AllreduceRingChunked for kRing, AllreduceHalvingDoubling for kHalvingDoubling) built once on
// `data`. Returns the seconds of each run on this rank (after `warmup` untimed runs).
std::vector<double> raw_gloo_allreduce_seconds(const ClusterResolver& resolver,
                                               const CommunicationOptions& options, float* data,
                                               size_t count, int warmup, int iterations);

// Under mpirun: times MPI_Allreduce(MPI_IN_PLACE, data, count, MPI_FLOAT, MPI_SUM,
// MPI_COMM_WORLD). Initialises MPI if needed.
std::vector<double> raw_mpi_allreduce_seconds(float* data, size_t count, int warmup,
                                              int iterations);

}  // namespace lockstep::distribute::detail
