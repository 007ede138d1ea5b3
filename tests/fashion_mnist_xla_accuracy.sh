#!/usr/bin/env bash
# The reference job on --device xla:cpu against --device cpu (issue 22): examples/fashion_mnist,
# same seed, same steps, on a subset that fits the suite (XLA's CPU code runs the reference
# CNN several times slower than oneDNN): the first $TRAIN training images (one epoch, batch 128)
# and the first $TEST test images, written as IDX files to a temp dir. The two test accuracies
# must agree within 0.5 points (the issue's bound). Skips (exit 77) without the dataset or
# without the xla backend.
#   fashion_mnist_xla_accuracy.sh <fashion_mnist binary>
set -euo pipefail
bin="$1"
src="${LOCKSTEP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
TRAIN=${TRAIN:-6144}
TEST=${TEST:-2000}
[ -f "$src/train-images-idx3-ubyte.gz" ] || { echo "dataset not installed at $src"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$src" "$tmp" "$TRAIN" "$TEST" <<'PY'
import gzip, struct, sys
src, dst, n_train, n_test = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for split, n in (("train", n_train), ("t10k", n_test)):
    for kind, hdr in (("images-idx3", 16), ("labels-idx1", 8)):
        name = f"{split}-{kind}-ubyte.gz"
        raw = gzip.open(f"{src}/{name}").read()
        head = bytearray(raw[:hdr])
        head[4:8] = struct.pack(">I", n)
        item = 28 * 28 if kind.startswith("images") else 1
        with gzip.open(f"{dst}/{name}", "wb", compresslevel=1) as f:
            f.write(bytes(head) + raw[hdr:hdr + n * item])
PY
run() {  # device -> the JSON line
  "$bin" --device "$1" --epochs 1 --batch-size 128 --seed 7 --threads 2 --data-dir "$tmp" \
    --out-dir "$tmp/out_${1//:/_}" >"$tmp/log_${1//:/_}" 2>&1 || {
    cat "$tmp/log_${1//:/_}"
    if grep -q "unknown backend\|no PJRT" "$tmp/log_${1//:/_}"; then exit 77; fi
    exit 1
  }
  tail -n 1 "$tmp/log_${1//:/_}"
}
cpu=$(run cpu)
xla=$(run xla:cpu)
grep -h "compile\|epoch 1" "$tmp"/log_* || true
python3 - "$cpu" "$xla" <<'PY'
import json, sys
cpu, xla = json.loads(sys.argv[1]), json.loads(sys.argv[2])
a, b = cpu["test_accuracy"], xla["test_accuracy"]
print(f"test accuracy after one epoch on the subset: cpu {a:.4f}, xla:cpu {b:.4f} "
      f"(diff {abs(a - b) * 100:.2f} points; bound 0.5); images/s cpu "
      f"{cpu['train_images_per_sec']:.0f}, xla:cpu {xla['train_images_per_sec']:.0f}; "
      f"xla compile {xla['compile_seconds']:.2f} s")
ok = abs(a - b) <= 0.005 and a > 0.6  # a > 0.6: it learned, so the comparison means something
sys.exit(0 if ok else 1)
PY
