#!/usr/bin/env bash
# Transformer training, Lockstep vs PyTorch and Keras 3 on JAX, side by side in one command:
# the ViT of `flowers --model vit` (images/s, batch 32, 64x64) and a ~10.8M-parameter GPT
# (tokens/s, batch 8, T = 256), each in float32 and in its bf16 mode (Lockstep and Keras:
# mixed_bfloat16; PyTorch: autocast bf16), at the same thread count; then the GPT at T = 2048
# (batch 1, the same 2048 tokens a step) for attention's per-token cost against T = 256.
# Rounds alternate the systems; medians over the rounds are reported with the ratio of
# Lockstep to the strongest peer. Programs: build/bin/transformer_bench and
# bench/transformer_peers.py (their headers say what each measures).
#   bench/run_transformer_bench.sh [ROUNDS=3] [THREADS=2]
# Environment:
#   BUILD=build                  the Lockstep build with bin/transformer_bench
#   TORCH_PY, JAX_PY             the peers' interpreters (default: .venv-bench-torch of
#                                this repository, made by LOCKSTEP_VENV=$PWD/.venv-bench-torch
#                                bench/setup_venv.sh (torch 2.15.0), and .venv-bench-jax:
#                                python3 -m venv .venv-bench-jax && .venv-bench-jax/bin/pip
#                                install keras==3.15.1 'jax[cpu]' numpy)
#   SYSTEMS=lockstep,pytorch,keras   WORKLOADS=vit,gpt,gpt2048   DTYPES=float32,bfloat16
#   TORCH_COMPILE=0              1: PyTorch under torch.compile (inductor) instead of eager
#   OUT_DIR=(temp dir)           measurements.jsonl and the report
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${2:-2}
BUILD=${BUILD:-build}
TORCH_PY=${TORCH_PY:-$PWD/.venv-bench-torch/bin/python}
JAX_PY=${JAX_PY:-$PWD/.venv-bench-jax/bin/python}
SYSTEMS=${SYSTEMS:-lockstep,pytorch,keras}
WORKLOADS=${WORKLOADS:-vit,gpt,gpt2048}
DTYPES=${DTYPES:-float32,bfloat16}
OUT_DIR=${OUT_DIR:-$(mktemp -d -t lockstep-transformer-bench.XXXXXX)}
mkdir -p "$OUT_DIR"
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
[ -e "$JEMALLOC" ] || JEMALLOC=
export OMP_NUM_THREADS=$THREADS
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads=$THREADS"
log="$OUT_DIR/measurements.jsonl"
: >"$log"
measure() {  # system workload dtype
  local sys=$1 wl=$2 dt=$3 model=${2%2048} seq=256 batch=() line
  [ "$wl" = gpt2048 ] && seq=2048 batch=(--batch-size 1)
  local policy=$dt
  [ "$dt" = bfloat16 ] && policy=mixed_bfloat16
  case $sys in
    lockstep) line=$("$BUILD/bin/transformer_bench" --model "$model" --dtype-policy "$policy" \
                --threads "$THREADS" --seq-len "$seq" "${batch[@]}" | tail -n 1) ;;
    pytorch) line=$(LD_PRELOAD=$JEMALLOC "$TORCH_PY" bench/transformer_peers.py --system pytorch \
               --model "$model" --dtype "$dt" --threads "$THREADS" --seq-len "$seq" "${batch[@]}" \
               --compile "${TORCH_COMPILE:-0}" 2>/dev/null | tail -n 1) ;;
    keras) line=$(KERAS_BACKEND=jax "$JAX_PY" bench/transformer_peers.py --system keras \
             --model "$model" --dtype "$dt" --threads "$THREADS" --seq-len "$seq" "${batch[@]}" \
             2>/dev/null | tail -n 1) ;;
  esac
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)  # the machine's 1-minute load after it (others' work too)
  echo "{\"round\": $round, \"workload\": \"$wl\", \"load\": $load, \"result\": $line}" |
    tee -a "$log" >&2
}
IFS=, read -ra systems <<<"$SYSTEMS"
for round in $(seq 1 "$ROUNDS"); do
  for wl in ${WORKLOADS//,/ }; do
    for dt in ${DTYPES//,/ }; do
      # Alternate the order of the systems from round to round.
      n=${#systems[@]}
      for ((i = 0; i < n; i++)); do
        measure "${systems[$(((i + round) % n))]}" "$wl" "$dt" || echo "failed: $wl $dt" >&2
      done
    done
  done
done
python3 - "$log" <<'PY' | tee "$OUT_DIR/report.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
med = {}
for r in rows:
    k = (r["workload"], r["result"]["dtype_policy"], r["result"]["system"])
    med.setdefault(k, []).append(r["result"]["items_per_sec"])
print(f"{'workload':10} {'dtype':15} {'lockstep':>10} {'pytorch':>10} {'keras':>10}  ratio")
out = {}
for wl in dict.fromkeys(r["workload"] for r in rows):
    for dt in ("float32", "mixed_bfloat16"):
        m = {s: statistics.median(med[(wl, dt, s)]) for s in ("lockstep", "pytorch", "keras")
             if (wl, dt, s) in med}
        if not m: continue
        peers = [v for s, v in m.items() if s != "lockstep"]
        ratio = m["lockstep"] / max(peers) if peers and "lockstep" in m else None
        unit = next(r["result"]["unit"] for r in rows if r["workload"] == wl)
        cells = " ".join(f"{m.get(s, float('nan')):10.1f}" for s in ("lockstep", "pytorch", "keras"))
        print(f"{wl:10} {dt:15} {cells}  {ratio:.2f}x  ({unit}/s, median of "
              f"{len(med.get((wl, dt, 'lockstep'), []))})" if ratio else f"{wl:10} {dt:15} {cells}")
        for s in m:
            print(f"    {s}: {sorted(med[(wl, dt, s)])}")
        out[f"{wl}/{dt}"] = {"medians": m, "ratio_to_best_peer": ratio}
for dt in ("float32", "mixed_bfloat16"):
    for s in ("lockstep", "pytorch", "keras"):
        a, b = med.get(("gpt", dt, s)), med.get(("gpt2048", dt, s))
        if a and b:
            c = statistics.median(a) / statistics.median(b)
            print(f"per-token cost T=2048 / T=256, {s} {dt}: {c:.2f}x")
            out[f"per_token_2048_over_256/{dt}/{s}"] = c
loads = [r["load"] for r in rows if "load" in r]
if loads:
    print(f"1-minute load average after the measurements: median {statistics.median(loads):.1f}, "
          f"max {max(loads):.1f} ({len(loads)} measurements)")
print(json.dumps(out))
PY
