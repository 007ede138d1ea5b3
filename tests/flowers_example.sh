#!/usr/bin/env bash
# End-to-end check of the flowers example on a small exported Fashion-MNIST image folder:
# it must write samples.png and predictions.png, end with the JSON line, learn something
# (accuracy above chance) and keep input wait under 5% of step time. Skips (77) without data.
set -euo pipefail
bin="$1"
dir="${LOCKSTEP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
[ -f "$dir/train-images-idx3-ubyte.gz" ] || { echo "dataset not installed at $dir"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
last=$("$bin" --out-dir "$out" --epochs 2 --per-class 60 --image-size 32 --batch-size 32 | tee /dev/stderr | tail -n 1)
for f in samples.png predictions.png; do
  [ -s "$out/$f" ] || { echo "flowers did not write $f"; exit 1; }
done
python3 - "$last" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"accuracy {r['test_accuracy']:.3f}, input wait {100 * r['input_wait_fraction']:.1f}%")
sys.exit(0 if r["test_accuracy"] > 0.3 and r["classes"] == 10 and r["input_wait_fraction"] < 0.05 else 1)
PY
