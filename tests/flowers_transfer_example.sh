#!/usr/bin/env bash
# The flowers example in transfer mode end to end (issue 23), on a small exported Fashion-MNIST
# image folder, with a backbone weight file made by Keras in the test:
# - Keras (tests/flowers_transfer_keras.py, the interop venv) builds MobileNetV2(include_top=
#   False, weights=None, pooling="avg") at 32x32, seeded, and saves .weights.h5 and the legacy .h5;
# - `flowers --backbone mobilenet_v2 --weights backbone.weights.h5` trains the head for an epoch
#   with the backbone frozen, then fine-tunes from block_13_expand for an epoch;
# - the output names both phases, the JSON line counts both, the cost report has both phases
#   and their total, curves.png is written;
# - the backbone saved after the head phase equals Keras's file bit for bit (checked in Keras,
#   which loads it), and after fine-tuning the layers before block_13_expand and every
#   BatchNormalization still do while some layers from it on changed;
# - the legacy .h5 (read by layer name) loads the same way for a head-only run.
# Skips (77) without the Fashion-MNIST data or the Keras venv.
#   flowers_transfer_example.sh <flowers binary>
set -euo pipefail
bin="$1"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir="${LOCKSTEP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
[ -f "$dir/train-images-idx3-ubyte.gz" ] || { echo "dataset not installed at $dir"; exit 77; }
py=$("$here/interop/setup_venv.sh") || { echo "SKIPPED: no Keras venv"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
size=32 at=block_13_expand

# The image folder (20 images per class) and Keras's backbone weight files, side by side.
"$bin" --out-dir "$out/export" --epochs 0 --per-class 20 --image-size "$size" > /dev/null &
KERAS_BACKEND=jax "$py" "$here/flowers_transfer_keras.py" make "$out" "$size"
wait $!
images="$out/export/fashion_mnist_images"

run() {  # run NAME ARGS...: the example's output in $out/NAME.log, its JSON line in $last
  local name=$1
  shift
  "$bin" --data-dir "$images" --out-dir "$out/$name" --image-size "$size" --batch-size 32 \
    --threads 2 --backbone mobilenet_v2 --epochs 1 --save-backbone "$out/$name/backbone" "$@" \
    > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; echo "flowers $name failed"; exit 1; }
  cat "$out/$name.log"
  last=$(tail -n 1 "$out/$name.log")
}
expect() {  # expect LOG TEXT
  grep -qF -- "$2" "$out/$1.log" || { echo "flowers $1: output lacks '$2'"; exit 1; }
}

run tl --weights "$out/backbone.weights.h5" --fine-tune-at "$at" --fine-tune-epochs 1 \
  --report "$out/tl/report.json"
expect tl "weights: "
expect tl "phase 1/2 'head'"
expect tl "phase 'head' done: frozen backbone unchanged bit for bit"
expect tl "phase 2/2 'fine-tune': unfreezing the backbone from layer"
expect tl "('$at')"
expect tl "phase 'fine-tune' done:"
expect tl "phase 'head': epochs 1-1"
expect tl "phase 'fine-tune': epochs 2-2"
! grep -q RANDOM "$out/tl.log" || { echo "flowers said random weights with --weights"; exit 1; }
[[ "$last" == *'"epochs": 2,'* && "$last" == *'"phases": ["head", "fine-tune"]'* &&
   "$last" == *'"pretrained": true'* ]] || { echo "JSON line lacks both phases: $last"; exit 1; }
[ -s "$out/tl/curves.png" ] || { echo "flowers did not write curves.png"; exit 1; }
python3 - "$out/tl/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ph = r["phases"]
assert [p["name"] for p in ph] == ["head", "fine-tune"], ph
assert [p["epochs"] for p in ph] == [1, 1], ph
assert [e["phase"] for e in r["epochs"]] == ["head", "fine-tune"], r["epochs"]
assert r["samples"] == sum(p["samples"] for p in ph) > 0, (r["samples"], ph)
assert abs(r["train_seconds"] - sum(p["train_seconds"] for p in ph)) < 1e-6, r
assert r["wall_seconds"] >= sum(p["wall_seconds"] for p in ph) - 1e-6, r
print("cost report: phases", [(p["name"], p["samples"], round(p["wall_seconds"], 1)) for p in ph],
      "total", r["samples"], "samples", round(r["wall_seconds"], 1), "s")
PY

# The legacy Keras 2 layout (model.save's .h5, read by layer name), head only.
run legacy --weights "$out/backbone.h5"
expect legacy "phase 'head' done: frozen backbone unchanged bit for bit"

# No --weights: random initialisation, said plainly.
run random --epochs 0
expect random "RANDOM initial weights"
[[ "$(tail -n 1 "$out/random.log")" == *'"pretrained": false'* ]] || { echo "JSON: pretrained"; exit 1; }
# Keras loads the backbones Lockstep saved after each phase and compares them with its own.
KERAS_BACKEND=jax "$py" "$here/flowers_transfer_keras.py" check "$out" \
  "$out/tl/backbone.head.weights.h5" "$out/tl/backbone.fine-tune.weights.h5@$at" \
  "$out/legacy/backbone.head.weights.h5"
echo "flowers transfer mode: ok"
