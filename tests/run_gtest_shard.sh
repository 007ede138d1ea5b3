#!/usr/bin/env bash
# One shard of a large parameterised gtest family as one ctest test (CMakeLists.txt,
# LOCKSTEP_SHARDED_FAMILIES): the op tables run hundreds of small cases, and a process per case
# costs more than the case (a start of lockstep_tests, and for the xla table a PJRT client: about
# 0.5 s against 66 ms of work). Usage: run_gtest_shard.sh BINARY FILTER INDEX TOTAL [skips-pass].
# Exit: the binary's status when a case fails; 77 (ctest's skip) when every case passed but some
# were skipped, so scripts/check_skips.py lists them with their GTEST_SKIP reason, or 0 with
# skips-pass (the ASan tree, where every shard has some: it builds no examples); else 0.
set -uo pipefail
BIN=${1:?usage: run_gtest_shard.sh BINARY FILTER INDEX TOTAL}
FILTER=${2:?filter}
INDEX=${3:?shard index}
TOTAL=${4:?shard count}
SKIPS=${5:-}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
GTEST_TOTAL_SHARDS=$TOTAL GTEST_SHARD_INDEX=$INDEX "$BIN" --gtest_filter="$FILTER" >"$LOG" 2>&1
rc=$?
cat "$LOG"
[ "$rc" -ne 0 ] && exit "$rc"
grep -q '^\[  SKIPPED \]' "$LOG" && [ "$SKIPS" != skips-pass ] && exit 77
grep -q '^\[  PASSED  \] [1-9]' "$LOG" || { echo "run_gtest_shard.sh: no case of '$FILTER' ran in shard $INDEX of $TOTAL"; exit 1; }
exit 0
