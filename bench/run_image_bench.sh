#!/usr/bin/env bash
# Input-pipeline benchmark (issue #3): Lockstep vs PyTorch DataLoader + torchvision vs tf.data,
# same JPEG folder, same work (decode, resize to 180x180, random flip + rotation, batch 32),
# same thread count. The three systems alternate for ROUNDS rounds (order rotated each round),
# a machine-health probe runs before each, and medians are reported. Last line: JSON.
#
#   bench/run_image_bench.sh [ROUNDS=3] [THREADS=2]
#
# Environment: BUILD_DIR (default build), BATCHES (150), LOCKSTEP_IMAGE_BENCH_DIR (default
# /tmp/lockstep_image_bench/photos: 3000 generated photo-like RGB JPEGs, ~280-420 px, made on
# first use), IMAGE_BENCH_FOLDER=fashion to use Fashion-MNIST exported at 256x256 instead.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${2:-2}
BATCHES=${BATCHES:-150}
BIN=${BUILD_DIR:-build}/bin
for b in image_pipeline_bench lockstep; do
  [ -x "$BIN/$b" ] || { echo "build first: cmake --build ${BUILD_DIR:-build} --target $b" >&2; exit 1; }
done

PY=$(bench/setup_venv.sh)
# Peers in the bench venv. PyPI has no torchvision built for torch 2.15 yet; 0.29.2 (built for
# torch 2.14, requires torch>=2.14) imports and runs with it, installed without deps so pip
# leaves the pinned torch alone.
pipq=("$PY" -m pip install -q --disable-pip-version-check)
"$PY" -c "import torchvision" 2>/dev/null || "${pipq[@]}" --no-deps torchvision==0.29.2 >&2
"$PY" -c "import PIL" 2>/dev/null || "${pipq[@]}" pillow >&2
"$PY" -c "import tensorflow" 2>/dev/null || "${pipq[@]}" tensorflow-cpu==2.21.0 >&2

if [ "${IMAGE_BENCH_FOLDER:-photos}" = fashion ]; then
  DATA=${LOCKSTEP_IMAGE_BENCH_DIR:-/tmp/lockstep_image_bench/fashion256}
  [ -f "$DATA/.complete" ] || {
    rm -rf "$DATA"
    "$BIN/lockstep" export-image-folder --out "$DATA" --limit-per-class 300 --format jpeg --size 256 >&2
    touch "$DATA/.complete"; }
else
  DATA=${LOCKSTEP_IMAGE_BENCH_DIR:-/tmp/lockstep_image_bench/photos}
  [ -f "$DATA/.complete" ] || {
    rm -rf "$DATA"
    "$PY" bench/image_pipeline_peers.py make-folder --out "$DATA" --count 3000 >&2
    touch "$DATA/.complete"; }
fi

out=$(mktemp -d)
systems=(lockstep pytorch tensorflow)
for r in $(seq 1 "$ROUNDS"); do
  k=$(( (r - 1) % 3 ))
  order=("${systems[@]:$k}" "${systems[@]:0:$k}")
  for sys in "${order[@]}"; do
    if [ -x "$BIN/fma_health" ]; then "$BIN/fma_health" "$THREADS" | tail -n 1 >> "$out/health.jsonl"; fi
    case $sys in
      lockstep) "$BIN/image_pipeline_bench" --data-dir "$DATA" --threads "$THREADS" --batches "$BATCHES" 2>/dev/null ;;
      pytorch) "$PY" bench/image_pipeline_peers.py torch --data-dir "$DATA" --threads "$THREADS" --batches "$BATCHES" 2>/dev/null ;;
      tensorflow) "$PY" bench/image_pipeline_peers.py tf --data-dir "$DATA" --threads "$THREADS" --batches "$BATCHES" 2>/dev/null ;;
    esac | tail -n 1 >> "$out/$sys.jsonl"
    echo "round $r $sys: $(tail -n 1 "$out/$sys.jsonl")" >&2
  done
done

python3 - "$out" "$THREADS" "$DATA" <<'PY'
import json, os, statistics, sys
d, threads, data = sys.argv[1], int(sys.argv[2]), sys.argv[3]
load = lambda f: [json.loads(l) for l in open(os.path.join(d, f))] if os.path.exists(os.path.join(d, f)) else []
ls, pt, tf, health = load("lockstep.jsonl"), load("pytorch.jsonl"), load("tensorflow.jsonl"), load("health.jsonl")
med = lambda rows: statistics.median(r["images_per_sec"] for r in rows)
a, b, c = med(ls), med(pt), med(tf)
print(f"{'images/s (median)':22}{'Lockstep':>10}{'PyTorch':>10}{'tf.data':>10}")
print(f"{'decode+resize+aug':22}{a:10.0f}{b:10.0f}{c:10.0f}")
disturbed = False
if health:
    h = [r["fma_gflops"] for r in health]
    disturbed = min(h) < 0.6 * max(h)
    print(f"health FMA GFLOP/s: min {min(h):.0f} max {max(h):.0f}" + ("  (DISTURBED: host contention)" if disturbed else ""))
res = {"threads": threads, "rounds": len(ls), "data_dir": data, "files": ls[0]["files"],
       "lockstep_images_per_sec": a, "pytorch_images_per_sec": b, "tensorflow_images_per_sec": c,
       "lockstep_augment": ls[0].get("augment"), "torch_version": pt[0].get("torch_version"),
       "torchvision_version": pt[0].get("torchvision_version"), "tf_version": tf[0].get("tf_version"),
       "disturbed": disturbed, "ratio": a / max(b, c)}
print(json.dumps(res))
PY
