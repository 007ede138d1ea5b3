#!/usr/bin/env bash
# make test-under-load: the release ctest suite with CPU-burning busy loops beside it (default one
# per core), so that a test that depends on an idle machine (a wall-clock window, a sleep that
# must be enough) fails here instead of in CI. The loops are killed when this script exits, on
# success, failure or Ctrl-C (trap). Prints the suite's wall time.
#   scripts/test_under_load.sh [BURNERS] [JOBS] [CTEST_REGEX]
set -u
cd "$(dirname "$0")/.."
burners=${1:-$(nproc)}
jobs=${2:-$(nproc)}
regex=${3:-}
pids=()
stop_burners() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  pids=()
}
trap stop_burners EXIT
trap 'exit 130' INT TERM
for ((i = 0; i < burners; i++)); do
  (while :; do :; done) &
  pids+=($!)
done
echo "test-under-load: $burners busy loop(s) (pids ${pids[*]}) beside ctest -j $jobs${regex:+ -R $regex}"
junit="$PWD/build/ctest-under-load.xml"
args=(--preset release -j "$jobs" --output-junit "$junit")
[ -n "$regex" ] && args+=(-R "$regex")
start=$(date +%s)
ctest "${args[@]}"
rc=$?
echo "test-under-load: ctest exited $rc after $(($(date +%s) - start)) s under load"
stop_burners
python3 scripts/check_skips.py "$junit" || rc=1
exit $rc
