#!/usr/bin/env bash
# Scaling of the reference CNN (Fashion-MNIST, one epoch of fit) from 1 worker x 2 threads to
# 2 workers x 1 thread (MultiWorkerMirroredStrategy, Gloo over loopback), plus 2 in-process
# replicas x 1 thread (MirroredStrategy). Runs alternate; medians are reported. The last line is
# JSON: images/s of each setup, "ratio" (2 workers over 1 worker; target >= 0.9) and the fraction
# of all-reduce time hidden behind backward (1 - time blocked waiting / time in flight).
#   bench/strategy_bench.sh [BUILD_DIR] [REPEATS] [EPOCHS]
set -euo pipefail
BUILD=${1:-build}
REPEATS=${2:-2}
EPOCHS=${3:-1}
BIN="$BUILD/bin/fashion_mnist"
[ -x "$BIN" ] || { echo "strategy_bench: $BIN not built (cmake --build $BUILD --target fashion_mnist)" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
json_field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1" | tail -1; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

run_single() {
  OMP_NUM_THREADS=2 "$BIN" --epochs "$EPOCHS" --threads 2 > "$TMP/single.log" 2>&1
  json_field "$TMP/single.log" train_images_per_sec
}
run_mirrored() {
  OMP_NUM_THREADS=2 "$BIN" --epochs "$EPOCHS" --threads 2 --strategy mirrored > "$TMP/mirrored.log" 2>&1
  json_field "$TMP/mirrored.log" train_images_per_sec
}
run_workers() {
  local port=$((20000 + RANDOM % 20000))
  local cluster="\"cluster\":{\"worker\":[\"127.0.0.1:$port\",\"127.0.0.1:$((port + 1))\"]}"
  TF_CONFIG="{$cluster,\"task\":{\"type\":\"worker\",\"index\":1}}" OMP_NUM_THREADS=1 \
    "$BIN" --epochs "$EPOCHS" --threads 1 --strategy multi_worker > "$TMP/w1.log" 2>&1 &
  local pid1=$!
  TF_CONFIG="{$cluster,\"task\":{\"type\":\"worker\",\"index\":0}}" OMP_NUM_THREADS=1 \
    "$BIN" --epochs "$EPOCHS" --threads 1 --strategy multi_worker > "$TMP/w0.log" 2>&1
  wait "$pid1"
  echo "$(json_field "$TMP/w0.log" train_images_per_sec) $(json_field "$TMP/w0.log" allreduce_hidden_fraction)"
}

: > "$TMP/s"; : > "$TMP/m"; : > "$TMP/w"; : > "$TMP/h"
for i in $(seq "$REPEATS"); do
  s=$(run_single); echo "run $i: 1 worker x 2 threads: $s images/s" >&2; echo "$s" >> "$TMP/s"
  read -r w h < <(run_workers); echo "run $i: 2 workers x 1 thread: $w images/s (all-reduce hidden: $h)" >&2
  echo "$w" >> "$TMP/w"; echo "$h" >> "$TMP/h"
  m=$(run_mirrored); echo "run $i: 2 replicas x 1 thread (mirrored): $m images/s" >&2; echo "$m" >> "$TMP/m"
done
S=$(median < "$TMP/s"); W=$(median < "$TMP/w"); M=$(median < "$TMP/m"); H=$(median < "$TMP/h")
RATIO=$(awk -v a="$W" -v b="$S" 'BEGIN {printf "%.3f", a / b}')
printf '{"single_2threads_images_per_sec": %s, "two_workers_1thread_images_per_sec": %s, "mirrored_2x1_images_per_sec": %s, "ratio": %s, "allreduce_hidden_fraction": %s, "repeats": %s, "epochs": %s}\n' \
  "$S" "$W" "$M" "$RATIO" "$H" "$REPEATS" "$EPOCHS"
