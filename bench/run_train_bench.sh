#!/usr/bin/env bash
# Superseded by bench/run_peer_bench.sh (Keras and PyTorch, fp32 and bf16, CNN and ResNet; `make
# bench`); kept for quick Lockstep-vs-PyTorch checks.
# Lockstep vs PyTorch on the reference CNN (Fashion-MNIST, batch 128, same thread count),
# side by side in one run: the two systems alternate for ROUNDS rounds, a machine-health probe
# runs between them, and medians are reported. Last line: JSON with both figures and "ratio".
#   bench/run_train_bench.sh [ROUNDS=5] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
THREADS=${2:-2}
STEPS=${STEPS:-200}
[ -x build/bin/train_bench ] || { echo "build first: make build" >&2; exit 1; }
# The PyTorch venv bench/run_peer_bench.sh also uses (one ~4 GB install, not two).
PY=$(LOCKSTEP_VENV=${LOCKSTEP_VENV:-$PWD/.venv-bench-torch} bench/setup_venv.sh)
out=$(mktemp -d)
for r in $(seq 1 "$ROUNDS"); do
  order=(lockstep pytorch)
  (( r % 2 == 0 )) && order=(pytorch lockstep)
  for sys in "${order[@]}"; do
    build/bin/fma_health "$THREADS" | tail -n 1 >> "$out/health.jsonl"
    if [ "$sys" = lockstep ]; then
      OMP_NUM_THREADS=$THREADS build/bin/train_bench --threads "$THREADS" --train-steps "$STEPS" | tail -n 1 >> "$out/lockstep.jsonl"
    else
      "$PY" bench/pytorch_fashion_mnist.py --threads "$THREADS" --train-steps "$STEPS" | tail -n 1 >> "$out/pytorch.jsonl"
    fi
    echo "round $r $sys: $(tail -n 1 "$out/$sys.jsonl")" >&2
  done
done
python3 - "$out" "$THREADS" <<'PY'
import json, statistics, sys, os
d, threads = sys.argv[1], int(sys.argv[2])
load = lambda f: [json.loads(l) for l in open(os.path.join(d, f)) if l.strip()]
ls, pt, health = load("lockstep.jsonl"), load("pytorch.jsonl"), load("health.jsonl")
med = lambda rows, k: statistics.median(r[k] for r in rows)
h = [r["fma_gflops"] for r in health]
disturbed = min(h) < 0.6 * max(h)
print(f"{'':24}{'Lockstep':>12}{'PyTorch':>12}{'ratio':>8}")
for k, label in [("train_images_per_sec", "train images/s"), ("infer_images_per_sec", "infer images/s")]:
    a, b = med(ls, k), med(pt, k)
    print(f"{label:24}{a:12.0f}{b:12.0f}{a / b:8.2f}")
print(f"{'peak RSS MB':24}{med(ls, 'peak_rss_mb'):12.0f}{med(pt, 'peak_rss_mb'):12.0f}")
print(f"compile seconds (Lockstep): {med(ls, 'compile_seconds'):.3f}")
print(f"health FMA GFLOP/s: min {min(h):.0f} max {max(h):.0f}" + ("  (DISTURBED: host contention)" if disturbed else ""))
res = {"threads": threads, "rounds": len(ls), "torch_version": pt[0].get("torch_version"),
       "pytorch_memory_format": pt[0].get("memory_format"),
       "lockstep_train_images_per_sec": med(ls, "train_images_per_sec"),
       "pytorch_train_images_per_sec": med(pt, "train_images_per_sec"),
       "lockstep_infer_images_per_sec": med(ls, "infer_images_per_sec"),
       "pytorch_infer_images_per_sec": med(pt, "infer_images_per_sec"),
       "lockstep_compile_seconds": med(ls, "compile_seconds"),
       "lockstep_peak_rss_mb": med(ls, "peak_rss_mb"), "pytorch_peak_rss_mb": med(pt, "peak_rss_mb"),
       "infer_ratio": med(ls, "infer_images_per_sec") / med(pt, "infer_images_per_sec"),
       "disturbed": disturbed,
       "ratio": med(ls, "train_images_per_sec") / med(pt, "train_images_per_sec")}
print(json.dumps(res))
PY
