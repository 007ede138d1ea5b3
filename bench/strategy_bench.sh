#!/usr/bin/env bash
# Scaling of the reference CNN (Fashion-MNIST, one epoch of fit) from 1 worker x 2 threads to
# 2 workers x 1 thread (MultiWorkerMirroredStrategy): Gloo over TCP loopback (TF_CONFIG), and
# OpenMPI's shared-memory transport (mpirun -np 2, when built with MPI), plus 2 in-process
# replicas x 1 thread (MirroredStrategy). Runs alternate; medians are reported. The last line is
# JSON: images/s of each setup, "ratio_gloo" and "ratio_mpi" (2 workers over 1 worker), "ratio"
# (the better engine on this one host: what mpirun/srun launches use; target >= 0.9) and the
# fraction of all-reduce time hidden behind backward (1 - time blocked waiting / time in flight).
# WORKER_ARGS (e.g. "--all-reduce-dtype bfloat16") is passed to the multi-worker runs only.
#   bench/strategy_bench.sh [BUILD_DIR] [REPEATS] [EPOCHS]
set -euo pipefail
BUILD=${1:-build}
REPEATS=${2:-2}
EPOCHS=${3:-1}
read -r -a WARGS <<< "${WORKER_ARGS:-}"
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
    "$BIN" --epochs "$EPOCHS" --threads 1 --strategy multi_worker "${WARGS[@]}" > "$TMP/w1.log" 2>&1 &
  local pid1=$!
  TF_CONFIG="{$cluster,\"task\":{\"type\":\"worker\",\"index\":0}}" OMP_NUM_THREADS=1 \
    "$BIN" --epochs "$EPOCHS" --threads 1 --strategy multi_worker "${WARGS[@]}" > "$TMP/w0.log" 2>&1
  wait "$pid1"
  echo "$(json_field "$TMP/w0.log" train_images_per_sec) $(json_field "$TMP/w0.log" allreduce_hidden_fraction)"
}
# OpenMPI: only when mpirun exists and the build has the MPI backend (kAuto picks MPI under mpirun).
HAVE_MPI=0
if command -v mpirun > /dev/null && ldd "$BIN" 2> /dev/null | grep -q libmpi; then HAVE_MPI=1; fi
run_mpi() {
  OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to core -x OMP_NUM_THREADS \
    "$BIN" --epochs "$EPOCHS" --threads 1 --strategy multi_worker "${WARGS[@]}" > "$TMP/mpi.log" 2>&1
  echo "$(json_field "$TMP/mpi.log" train_images_per_sec) $(json_field "$TMP/mpi.log" allreduce_hidden_fraction)"
}

: > "$TMP/s"; : > "$TMP/m"; : > "$TMP/w"; : > "$TMP/h"; : > "$TMP/p"; : > "$TMP/ph"
for i in $(seq "$REPEATS"); do
  s=$(run_single); echo "run $i: 1 worker x 2 threads: $s images/s" >&2; echo "$s" >> "$TMP/s"
  read -r w h < <(run_workers); echo "run $i: 2 Gloo workers x 1 thread: $w images/s (all-reduce hidden: $h)" >&2
  echo "$w" >> "$TMP/w"; echo "$h" >> "$TMP/h"
  if [ "$HAVE_MPI" = 1 ]; then
    read -r p ph < <(run_mpi); echo "run $i: 2 MPI workers x 1 thread: $p images/s (all-reduce hidden: $ph)" >&2
    echo "$p" >> "$TMP/p"; echo "$ph" >> "$TMP/ph"
  fi
  m=$(run_mirrored); echo "run $i: 2 replicas x 1 thread (mirrored): $m images/s" >&2; echo "$m" >> "$TMP/m"
done
S=$(median < "$TMP/s"); W=$(median < "$TMP/w"); M=$(median < "$TMP/m"); H=$(median < "$TMP/h")
RG=$(awk -v a="$W" -v b="$S" 'BEGIN {printf "%.3f", a / b}')
if [ "$HAVE_MPI" = 1 ]; then
  P=$(median < "$TMP/p"); PH=$(median < "$TMP/ph")
  RM=$(awk -v a="$P" -v b="$S" 'BEGIN {printf "%.3f", a / b}')
else
  P=null; PH=null; RM=null
fi
RATIO=$(awk -v g="$RG" -v m="$RM" 'BEGIN {r = g; if (m != "null" && m + 0 > r) r = m; printf "%.3f", r}')
printf '{"single_2threads_images_per_sec": %s, "gloo_2workers_1thread_images_per_sec": %s, "mpi_2workers_1thread_images_per_sec": %s, "mirrored_2x1_images_per_sec": %s, "ratio_gloo": %s, "ratio_mpi": %s, "ratio": %s, "allreduce_hidden_fraction_gloo": %s, "allreduce_hidden_fraction_mpi": %s, "repeats": %s, "epochs": %s}\n' \
  "$S" "$W" "$P" "$M" "$RG" "$RM" "$RATIO" "$H" "$PH" "$REPEATS" "$EPOCHS"
