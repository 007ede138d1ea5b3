#!/bin/sh
# All-reduce bandwidth benchmark: Lockstep's Communicator vs raw Gloo (ring-chunked,
# halving-doubling) and raw MPI_Allreduce, 2 workers over loopback, 1/4/16/64 MiB.
# Usage: bench/run_allreduce_bench.sh [build-dir] [allreduce_bench flags...]
# Prints a table; the last line is JSON.
set -e
cd "$(dirname "$0")/.."
BUILD=${1:-build}
[ $# -gt 0 ] && shift
if [ ! -x "$BUILD/bin/allreduce_bench" ]; then
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$BUILD" -j"$(nproc)" --target allreduce_bench
fi
exec "$BUILD/bin/allreduce_bench" "$@"
