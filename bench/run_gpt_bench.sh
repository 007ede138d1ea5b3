#!/usr/bin/env bash
# The GPT benchmark (bench/gpt_bench.cpp): the 10M-parameter preset's training step in float32
# and mixed_bfloat16, alternating, ROUNDS rounds; then generation with and without the key/value
# cache. Prints each run's JSON line and the medians.
#   bench/run_gpt_bench.sh [ROUNDS (3)] [THREADS (2)]     (BUILD=build, STEPS=5, WARMUP=2)
set -euo pipefail
rounds=${1:-3}
threads=${2:-2}
bin=${BUILD:-build}/bin/gpt_bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  for policy in float32 mixed_bfloat16; do
    "$bin" --preset 10m --mode train --dtype-policy "$policy" --threads "$threads" \
      --train-steps "${STEPS:-5}" --warmup "${WARMUP:-2}" | tail -n 1 | tee -a "$out"
  done
  "$bin" --preset 10m --mode generate --threads "$threads" | tail -n 1 | tee -a "$out"
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(key, **match):
    v = [r[key] for r in runs if all(r[k] == m for k, m in match.items()) and r[key] > 0]
    return statistics.median(v) if v else 0.0
print(f"training, float32:        {med('train_tokens_per_sec', dtype_policy='float32'):9.1f} tokens/s")
print(f"training, mixed_bfloat16: {med('train_tokens_per_sec', dtype_policy='mixed_bfloat16'):9.1f} tokens/s")
print(f"generation, cache:        {med('generate_tokens_per_sec'):9.1f} tokens/s")
print(f"generation, no cache:     {med('generate_nocache_tokens_per_sec'):9.1f} tokens/s")
PY
