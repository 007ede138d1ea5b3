// One worker of a multi-process collective check: reads the cluster from the environment
// (TF_CONFIG, mpirun, srun), connects, all-reduces / broadcasts / all-gathers known values and
// checks them. Used by the MPI and network-namespace tests; handy to try a real cluster:
//   TF_CONFIG='{"cluster":{"worker":["h1:2222","h2:2222"]},"task":{"type":"worker","index":0}}' \
//     build/bin/collective_worker --implementation ring --timeout-ms 10000
// --repeat-seconds S keeps all-reducing for S seconds (for fault tests).
// Prints one JSON line {"rank":..,"size":..,"backend":..,"ok":true,"seconds":..} on success;
// on failure prints the error on stderr and exits 1.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lockstep/core/parse.h"
#include "lockstep/distribute/collective.h"

namespace ld = lockstep::distribute;

static const char* kUsage =
    "usage: collective_worker [--implementation auto|ring|halving_doubling|mpi] [--timeout-ms N]\n"
    "       [--count N] [--repeat-seconds S]\n"
    "  one worker of a collective check; the cluster comes from TF_CONFIG, mpirun or srun\n";

int main(int argc, char** argv) {
  ld::CommunicationOptions options;
  size_t count = 1000003;
  double repeat_seconds = 0;  // keep all-reducing this long (fault tests cut the network)
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag == "--help" || flag == "-h") return std::fputs(kUsage, stdout), 0;
      if (i + 1 >= argc) {
        std::fprintf(stderr, "collective_worker: %s needs a value\n", flag.c_str());
        return 2;
      }
      const std::string value = argv[i + 1];
      if (flag == "--implementation") {
        options.implementation = ld::parse_collective_implementation(value);
      } else if (flag == "--timeout-ms") {
        options.timeout =
            std::chrono::milliseconds(lockstep::parse_int(flag, value, 1, 24 * 3600 * 1000));
      } else if (flag == "--repeat-seconds") {
        repeat_seconds = lockstep::parse_double(flag, value, 0, 7 * 24 * 3600);
      } else if (flag == "--count") {
        count = size_t(lockstep::parse_int(flag, value, 1, int64_t(1) << 31));
      } else {
        std::fprintf(stderr, "collective_worker: unknown flag %s\n%s", flag.c_str(), kUsage);
        return 2;
      }
    }
  } catch (const std::exception& e) {  // a flag's value: which flag and why
    std::fprintf(stderr, "collective_worker: %s\n", e.what());
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    const auto resolver = ld::ClusterResolver::from_environment();
    auto comm = ld::connect(resolver, options);
    const int rank = comm->rank(), n = comm->size();
    auto input = [](int r, size_t i) { return float((r + 1) * int(i % 89)) - 2.0f * r; };
    std::vector<float> x(count);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < count; ++i) x[i] = input(rank, i);
      comm->allreduce_sum(x.data(), count);
      for (size_t i = 0; i < count; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += input(r, i);
        if (x[i] != want) {
          std::fprintf(stderr, "worker %d: allreduce element %zu is %g, expected %g\n", rank, i,
                       x[i], want);
          return 1;
        }
      }
    }
    std::vector<float> y(count, 1.0f);
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           repeat_seconds) {
      comm->allreduce_sum(y.data(), count);
      std::fill(y.begin(), y.end(), 1.0f);
    }
    std::vector<float> b1(7, float(rank)), b2(1001, 1.0f);
    std::vector<ld::FloatBuffer> bucket{{b1.data(), b1.size()}, {b2.data(), b2.size()}};
    comm->allreduce_sum(std::span<const ld::FloatBuffer>(bucket));
    if (b1[6] != float(n * (n - 1) / 2) || b2[1000] != float(n)) {
      std::fprintf(stderr, "worker %d: bucket all-reduce gave %g, %g\n", rank, b1[6], b2[1000]);
      return 1;
    }
    std::vector<float> w(100, float(rank));
    comm->broadcast(w.data(), w.size(), 0);
    const std::string mine = "w" + std::to_string(rank);
    const auto all = comm->allgather_bytes(mine.data(), mine.size());
    for (int r = 0; r < n; ++r) {
      if (std::string(all[r].begin(), all[r].end()) != "w" + std::to_string(r) || w[99] != 0) {
        std::fprintf(stderr, "worker %d: broadcast/allgather mismatch\n", rank);
        return 1;
      }
    }
    comm->barrier();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "{\"rank\": %d, \"size\": %d, \"backend\": \"%s\", \"cluster\": \"%s\", "
        "\"ok\": true, \"seconds\": %.3f}\n",
        rank, n, comm->backend().c_str(), resolver.kind_name(), seconds);
    std::fflush(stdout);
    comm->close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_worker: %s\n", e.what());
    return 1;
  }
  return 0;
}
