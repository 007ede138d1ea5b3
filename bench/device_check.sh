#!/usr/bin/env bash
# The accelerator check of issue 22, one script for the lent GPU machine (the `device` tool):
#   1. binaries: prebuilt ones carried in .device-pack/ (see "pack" below), else $BIN, else a
#      build here (build-device: Release, no oneDNN, portable; needs the project's deps);
#   2. the xla op tests on the plugin (XlaOpTable: forward, gradient check, bf16; the train-step
#      and Model tests), the plugin found by name in the Python environment;
#   3. the reference job (examples/fashion_mnist) to 91% test accuracy: time and compile time;
#   4. the small ResNet of bench/bench_resnet.h, Lockstep on the plugin vs PyTorch (cuDNN,
#      channels_last, torch.autocast bf16) vs JAX/Flax, fp32 and bf16: images/s and the fraction
#      of the GPU's peak (bench/gpu_peers.py).
# Writes $OUT/device_check.json and $OUT/device_check.md (OUT defaults to ./device_check_out) and
# prints the summary. Each part is timed and bounded, so the whole fits the 10-minute call.
#
#   bench/device_check.sh pack   here (x86-64, the project's deps installed): builds portable
#                                binaries and gathers them, the non-system shared libraries they
#                                load and the Fashion-MNIST files into .device-pack/ (git-ignored)
#   bench/device_check.sh        there: run(command="bash bench/device_check.sh",
#                                carry=[".device-pack"], timeout_s=600)
#
# Environment:
#   DEVICE=xla:cuda   the --device of the runs (xla:cpu checks the script itself, on the CPU plugin)
#   TINY=1            tiny sizes (a 2048-image subset to 60%, a 32x32 ResNet for a few steps):
#                     TINY=1 DEVICE=xla:cpu BIN=build/bin bench/device_check.sh is how it was run here
#   BIN=DIR           the built binaries (lockstep_tests, fashion_mnist, train_bench)
#   PEAK_FP32_TFLOPS / PEAK_BF16_TFLOPS   the peaks the fractions use (H200: 67 and 989, dense)
#   PYTHON            the python with torch / jax / flax (default python3)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACK=$ROOT/.device-pack
DEVICE=${DEVICE:-xla:cuda}
TINY=${TINY:-0}
OUT=${OUT:-$ROOT/device_check_out}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
log() { echo "[device_check $(date +%H:%M:%S)] $*" >&2; }

# ---- pack: portable binaries + their libraries + the dataset, for a machine without the deps
if [ "${1:-}" = pack ]; then
  set -e
  B=$ROOT/build-device
  cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_NATIVE=OFF \
    -DLOCKSTEP_WITH_DNNL=OFF -DLOCKSTEP_BUILD_TESTS=ON >/dev/null
  cmake --build "$B" -j"$(nproc)" --target lockstep_tests fashion_mnist train_bench
  rm -rf "$PACK" && mkdir -p "$PACK/bin" "$PACK/lib" "$PACK/fashion-mnist"
  for t in lockstep_tests fashion_mnist train_bench; do
    cp "$B/bin/$t" "$PACK/bin/" && strip "$PACK/bin/$t"
  done
  # Every library they load but the C library's own (libc, libm, ld.so...: the target has those).
  for f in "$PACK"/bin/*; do
    LD_LIBRARY_PATH=$B/lib ldd "$f" | awk '$3 ~ /^\// {print $3}'
  done | sort -u | grep -vE '/(libc|libm|libdl|librt|libpthread|libresolv|ld-linux[^/]*)\.so' |
    while read -r l; do cp -L "$l" "$PACK/lib/" && strip --strip-unneeded "$PACK/lib/$(basename "$l")"; done
  cp "${LOCKSTEP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"/*.gz "$PACK/fashion-mnist/"
  # Binaries and libraries xz-compressed (~44 MB -> ~12 MB): with the 30 MB dataset and the tree
  # they must fit the 64 MiB that travels; the run unpacks them.
  tar -C "$PACK" -cJf "$PACK/bin-lib.tar.xz" bin lib && rm -rf "$PACK/bin" "$PACK/lib"
  du -sh "$PACK" "$PACK"/*
  echo "pack: $(du -sm "$PACK" | cut -f1) MiB (the tree that travels must stay under 64 MiB)"
  exit 0
fi

# ---- 1. binaries
START=$(date +%s)
if [ -f "$PACK/bin-lib.tar.xz" ] && [ ! -d "$PACK/bin" ]; then
  tar -C "$PACK" -xJf "$PACK/bin-lib.tar.xz"
fi
if [ -z "${BIN:-}" ] && [ -x "$PACK/bin/lockstep_tests" ]; then
  BIN=$PACK/bin
  export LD_LIBRARY_PATH=$PACK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export LOCKSTEP_FASHION_MNIST_DIR=${LOCKSTEP_FASHION_MNIST_DIR:-$PACK/fashion-mnist}
elif [ -z "${BIN:-}" ]; then
  log "building build-device (no .device-pack/ and no BIN)"
  cmake -S "$ROOT" -B "$ROOT/build-device" -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_NATIVE=OFF \
    -DLOCKSTEP_WITH_DNNL=OFF >"$OUT/build.log" 2>&1 &&
    cmake --build "$ROOT/build-device" -j"$(nproc)" \
      --target lockstep_tests fashion_mnist train_bench >>"$OUT/build.log" 2>&1 ||
    { tail -n 30 "$OUT/build.log"; log "build failed: run 'bench/device_check.sh pack' on a machine with the deps and carry .device-pack"; exit 1; }
  BIN=$ROOT/build-device/bin
fi
DATA=${LOCKSTEP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
PLUGIN=${DEVICE#xla:}
export LOCKSTEP_XLA_PLUGIN=$PLUGIN LOCKSTEP_XLA_TEST_PLUGIN=$PLUGIN
# XLA takes the GPU's memory as it needs it, so PyTorch and JAX can run after it.
export XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=.45
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
log "binaries: $BIN; device $DEVICE; data $DATA"
declare -A R  # the summary's fields

# ---- 2. the xla op tests on the plugin (the CPU-only and multi-device ones left out)
FILTER='All/XlaOpTable.*:XlaLowering.*:XlaTrainStep.*:XlaBackend.*:XlaModel.*'
FILTER+=':-*TwoReplicas*:*Cpu*Device*:XlaLowering.PluginErrors*:*For20Steps'
t0=$(date +%s)
# float32 products in float32 (not TF32): the op table compares with the reference kernels.
export LOCKSTEP_XLA_F32_PRECISION=highest
timeout "${OPTEST_TIMEOUT:-180}" "$BIN/lockstep_tests" --gtest_filter="$FILTER" --gtest_brief=1 \
  >"$OUT/op_tests.log" 2>&1
rc=$?
# The 20-step Model comparisons each in a process of its own, as ctest runs them (in one process
# they see the earlier tests' global state and drift: see docs/accelerator.md).
for t in XlaModel.ReferenceCnnMatchesTheCpuBackendFor20Steps \
  XlaModel.ResidualModelWithBatchNormMatchesTheCpuBackendFor20Steps; do
  timeout 120 "$BIN/lockstep_tests" --gtest_filter="$t" --gtest_brief=1 >>"$OUT/op_tests.log" 2>&1 ||
    rc=1
done
unset LOCKSTEP_XLA_F32_PRECISION
R[op_tests_rc]=$rc
R[op_tests_passed]=$(grep -oE '\[  PASSED  \] [0-9]+' "$OUT/op_tests.log" | grep -oE '[0-9]+$' |
  awk '{s += $1} END {print s + 0}')
R[op_tests_failed]=$(grep -oE '^\[  FAILED  \] [A-Za-z][A-Za-z0-9_./]*' "$OUT/op_tests.log" | sort -u | wc -l)
R[op_tests_seconds]=$(($(date +%s) - t0))
grep -E '^\[  (FAILED|PASSED) ' "$OUT/op_tests.log" | head -n 20
log "op tests: rc $rc, ${R[op_tests_passed]} passed, ${R[op_tests_failed]} failed, ${R[op_tests_seconds]} s"

# ---- 3. the reference job to 91%
FM_ARGS=(--epochs 5 --target-accuracy 0.91 --batch-size 128 --seed 1)
if [ "$TINY" = 1 ]; then  # 2048 training / 1000 test images, one epoch, to 60%
  sub=$OUT/fmnist_subset && mkdir -p "$sub"
  "$PYTHON" - "$DATA" "$sub" <<'PY'
import gzip, struct, sys
src, dst = sys.argv[1], sys.argv[2]
for split, n in (("train", 2048), ("t10k", 1000)):
    for kind, hdr, item in (("images-idx3", 16, 784), ("labels-idx1", 8, 1)):
        raw = gzip.open(f"{src}/{split}-{kind}-ubyte.gz").read()
        head = bytearray(raw[:hdr]); head[4:8] = struct.pack(">I", n)
        with gzip.open(f"{dst}/{split}-{kind}-ubyte.gz", "wb", compresslevel=1) as f:
            f.write(bytes(head) + raw[hdr:hdr + n * item])
PY
  DATA=$sub
  FM_ARGS=(--epochs 1 --target-accuracy 0.6 --batch-size 128 --seed 1)
fi
t0=$(date +%s)
timeout "${FM_TIMEOUT:-240}" "$BIN/fashion_mnist" --device "$DEVICE" --data-dir "$DATA" \
  "${FM_ARGS[@]}" --out-dir "$OUT/fashion_mnist" >"$OUT/fashion_mnist.log" 2>&1
R[fashion_mnist_rc]=$?
R[fashion_mnist_wall_seconds]=$(($(date +%s) - t0))
R[fashion_mnist_json]=$(tail -n 1 "$OUT/fashion_mnist.log" | grep '^{' || echo '{}')
grep -E 'reached|epoch [0-9]+:|compile' "$OUT/fashion_mnist.log" | head -n 12
log "reference job: rc ${R[fashion_mnist_rc]}: ${R[fashion_mnist_json]}"

# ---- 4. the ResNet: Lockstep on the plugin, PyTorch, JAX/Flax; fp32 and bf16
if [ "$TINY" = 1 ]; then RB=(16 3 1 64); else RB=(256 60 10 64); fi  # batch, steps, warm-up, size
bench_json() {  # name, command... -> R[name] = the command's last JSON line (or an error)
  local name=$1; shift
  timeout "${BENCH_TIMEOUT:-150}" "$@" >"$OUT/$name.log" 2>&1
  local rc=$? line
  line=$(grep '^{' "$OUT/$name.log" | tail -n 1)
  R[$name]=${line:-"{\"error\": \"rc $rc, see $name.log\"}"}
  log "$name: ${R[$name]}"
}
for dt in float32 bfloat16; do
  pol=$([ $dt = bfloat16 ] && echo mixed_bfloat16 || echo float32)
  bench_json "lockstep_$dt" "$BIN/train_bench" --model resnet --mode train --device "$DEVICE" \
    --dtype-policy "$pol" --batch-size "${RB[0]}" --train-steps "${RB[1]}" --warmup "${RB[2]}"
  pdev=$([ "$PLUGIN" = cpu ] && echo cpu || echo cuda)
  for sys in pytorch jax; do
    bench_json "${sys}_$dt" "$PYTHON" "$ROOT/bench/gpu_peers.py" --system $sys --dtype $dt \
      --device "$pdev" --batch-size "${RB[0]}" --steps "${RB[1]}" --warmup "${RB[2]}" \
      --image-size "${RB[3]}"
  done
done

# ---- summary
{
  echo "{"
  echo "  \"device\": \"$DEVICE\", \"tiny\": $TINY, \"seconds\": $(($(date +%s) - START)),"
  for k in "${!R[@]}"; do
    v=${R[$k]}
    [[ $v =~ ^[-0-9]+$ || $v == \{* ]] || v="\"$v\""
    echo "  \"$k\": $v,"
  done | sort | sed '$ s/,$//'
  echo "}"
} >"$OUT/device_check.json"
"$PYTHON" - "$OUT/device_check.json" "${RB[3]}" "${PEAK_FP32_TFLOPS:-67}" "${PEAK_BF16_TFLOPS:-989}" \
  >"$OUT/device_check.md" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
size, peak = int(sys.argv[2]), {"float32": float(sys.argv[3]), "bfloat16": float(sys.argv[4])}
# bench_resnet.h: 49.1 M multiply-adds per 64x64 image forward; training ~3x forward (2 FLOP/MAC).
flop = 3 * 2 * 49.1e6 * (size / 64) ** 2
fm = r.get("fashion_mnist_json", {})
print(f"# device check on {r['device']}{' (tiny sizes)' if r['tiny'] else ''}: {r['seconds']} s\n")
print(f"- xla op tests: {r['op_tests_passed']} passed, {r['op_tests_failed']} failed "
      f"(rc {r['op_tests_rc']}, {r['op_tests_seconds']} s)")
print(f"- reference job: test accuracy {fm.get('best_test_accuracy', 'n/a')}, target "
      f"{fm.get('target_accuracy', 'n/a')} reached in {fm.get('seconds_to_target', 'n/a')} s of "
      f"training (epoch {fm.get('epochs_to_target', 'n/a')}), compile {fm.get('compile_seconds', 'n/a')} s, "
      f"{fm.get('train_images_per_sec', 'n/a')} images/s (rc {r['fashion_mnist_rc']})\n")
print(f"| ResNet {size}x{size} train | dtype | images/s | TFLOP/s | fraction of peak | config |")
print("|---|---|---|---|---|---|")
for dt in ("float32", "bfloat16"):
    for sysname in ("lockstep", "pytorch", "jax"):
        j = r.get(f"{sysname}_{dt}", {})
        ips = j.get("images_per_sec", j.get("train_images_per_sec"))
        if ips is None:
            print(f"| {sysname} | {dt} | - | - | - | {j.get('error', 'not run')} |")
            continue
        tf = ips * flop / 1e12
        print(f"| {sysname} | {dt} | {ips:.0f} | {tf:.1f} | {tf / peak[dt]:.1%} | "
              f"{j.get('config', j.get('device', ''))} |")
PY
cat "$OUT/device_check.md"
[ "${R[op_tests_rc]}" = 0 ] && [ "${R[fashion_mnist_rc]}" = 0 ]
