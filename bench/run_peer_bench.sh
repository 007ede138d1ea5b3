#!/usr/bin/env bash
# Lockstep vs the strongest peers, side by side in one command: Keras 3.15.1 on
# tensorflow-cpu 2.21.0 and PyTorch 2.15.0 (pip, jemalloc preloaded), each in fp32 and in its
# own bf16 mode, on the reference CNN (train batch 128, inference batch 1000) and a small ResNet
# (bench/bench_resnet.h; train batch 64, inference batch 256), same thread count everywhere;
# with WORKLOADS=applications, keras.applications' MobileNetV2 and EfficientNetB0 (PyTorch:
# torchvision's models of the same architecture) at IMAGE_SIZE, batch 32: training, inference,
# and training with the backbone frozen (the "frozen vs full" line).
# Rounds alternate the systems; the FMA health probe runs between measurements and disturbed
# measurements are repeated; medians are reported. Last line: one JSON object with every
# figure (see bench/peer_bench.py).
#   bench/run_peer_bench.sh [ROUNDS=3] [THREADS=2]
# Environment:
#   BUILD=build          the Lockstep build with bin/train_bench and bin/fma_health
#   STEPS_SCALE=1        multiplies the timed steps (0.1: a quick check of the harness)
#   WORKLOADS=cnn_train,resnet_train,cnn_infer,resnet_infer   DTYPES=float32,bfloat16
#            (or any of mobilenet_v2_train, mobilenet_v2_infer, mobilenet_v2_frozen_train,
#            efficientnet_b0_train, efficientnet_b0_infer, efficientnet_b0_frozen_train;
#            "applications" = those six; text_conv1d_train, text_conv1d_infer,
#            text_bilstm_train, text_bilstm_infer: "text" = those four; "all" = every workload)
#   IMAGE_SIZE=96        the application workloads' input size
#   SYSTEMS=lockstep,keras,pytorch
#   THRESHOLD=0.7        a probe below THRESHOLD x the healthy rate flags a measurement
#   BANDWIDTH_THRESHOLD=0  also flag one whose DRAM bandwidth reads below this x the healthy one
#                        (0: the bandwidths are recorded, not used)
#   EXCHANGE_THRESHOLD=0  also flag one whose thread-exchange probe reads below this x the
#                        healthy rate (the vCPUs on different CCDs; 0: recorded, not used)
#   MAX_RETRIES=2        repeats of a flagged measurement
#   KERAS_XLA=probe      probe: short jit_compile off/on runs first, rounds use the faster;
#                        off: never XLA; both: measure both in every round
#   OUT_DIR=(temp dir)   where measurements.jsonl and result.json are written
# The peers install themselves on first use (bench/setup_peers.sh: .venv-bench-tf and
# .venv-bench-torch in the repository, ~6 GB; minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
THREADS=${2:-2}
BUILD=${BUILD:-build}
for bin in train_bench fma_health; do
  if [ ! -x "$BUILD/bin/$bin" ]; then
    echo "run_peer_bench: $BUILD/bin/$bin missing; build first (make build, or set BUILD=DIR)" >&2
    exit 1
  fi
done
eval "$(bench/setup_peers.sh)"
[ -n "$JEMALLOC" ] ||
  echo "run_peer_bench: WARNING: no libjemalloc.so.2; PyTorch runs with glibc malloc" >&2
OUT_DIR=${OUT_DIR:-$(mktemp -d -t lockstep-peer-bench.XXXXXX)}
mkdir -p "$OUT_DIR"
python3 bench/peer_bench.py "$ROUNDS" "$THREADS" --build "$BUILD" --tf-py "$TF_PY" \
  --torch-py "$TORCH_PY" --jemalloc "$JEMALLOC" --out-dir "$OUT_DIR" \
  --steps-scale "${STEPS_SCALE:-1}" --threshold "${THRESHOLD:-0.7}" \
  --bandwidth-threshold "${BANDWIDTH_THRESHOLD:-0}" \
  --exchange-threshold "${EXCHANGE_THRESHOLD:-0}" \
  --max-retries "${MAX_RETRIES:-2}" --keras-xla "${KERAS_XLA:-probe}" \
  --workloads "${WORKLOADS:-cnn_train,resnet_train,cnn_infer,resnet_infer}" \
  --image-size "${IMAGE_SIZE:-96}" \
  --dtypes "${DTYPES:-float32,bfloat16}" --systems "${SYSTEMS:-lockstep,keras,pytorch}" |
  tee "$OUT_DIR/report.txt"
# The JSON line, atomically, next to the raw measurements.
tail -n 1 "$OUT_DIR/report.txt" >"$OUT_DIR/result.json.tmp"
mv "$OUT_DIR/result.json.tmp" "$OUT_DIR/result.json"
