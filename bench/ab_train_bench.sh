#!/usr/bin/env bash
# A/B of two Lockstep builds on the reference CNN (train_bench): the builds alternate for ROUNDS
# rounds with the machine-health probe (B's fma_health) between runs; prints medians and B/A.
#   bench/ab_train_bench.sh BUILD_A BUILD_B [ROUNDS=5] [THREADS=2]
set -euo pipefail
A=$1 B=$2 ROUNDS=${3:-5} THREADS=${4:-2}
STEPS=${STEPS:-200}
out=$(mktemp -d)
for r in $(seq 1 "$ROUNDS"); do
  order=(a b)
  (( r % 2 == 0 )) && order=(b a)
  for which in "${order[@]}"; do
    dir=$A; [ "$which" = b ] && dir=$B
    "$B/bin/fma_health" "$THREADS" | tail -n 1 >> "$out/health.jsonl"
    OMP_NUM_THREADS=$THREADS "$dir/bin/train_bench" --threads "$THREADS" --train-steps "$STEPS" \
      | tail -n 1 >> "$out/$which.jsonl"
    echo "round $r $which: $(tail -n 1 "$out/$which.jsonl")" >&2
  done
done
python3 - "$out" <<'PY'
import json, os, statistics, sys
d = sys.argv[1]
load = lambda f: [json.loads(l) for l in open(os.path.join(d, f)) if l.strip()]
a, b, h = load("a.jsonl"), load("b.jsonl"), [r["fma_gflops"] for r in load("health.jsonl")]
med = lambda rows, k: statistics.median(r[k] for r in rows)
res = {}
for k in ["train_images_per_sec", "infer_images_per_sec", "compile_seconds", "peak_rss_mb"]:
    res[k] = {"a": med(a, k), "b": med(b, k), "ratio_b_over_a": med(b, k) / med(a, k)}
    print(f"{k:24}{res[k]['a']:12.3f}{res[k]['b']:12.3f}{res[k]['ratio_b_over_a']:8.3f}")
res["health_disturbed"] = min(h) < 0.6 * max(h)
print(json.dumps(res))
PY
