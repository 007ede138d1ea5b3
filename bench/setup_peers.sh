#!/usr/bin/env bash
# Installs the peers of bench/run_peer_bench.sh into cached virtual environments (ignored by
# git, /.venv*/):
#   <repo>/.venv-bench-tf     Keras 3.15.1 on tensorflow-cpu 2.21.0 (~1.6 GB)
#   <repo>/.venv-bench-torch  PyTorch 2.15.0 from pip (through bench/setup_venv.sh), and
#                             Debian's libjemalloc2 (preloaded when PyTorch runs)
# Idempotent: a venv with its marker file is reused at once. Progress goes to stderr; stdout
# is three lines, KEY=VALUE, for the caller to eval:
#   TF_PY=<python of the Keras venv>
#   TORCH_PY=<python of the PyTorch venv>
#   JEMALLOC=<path of libjemalloc.so.2, empty when it could not be installed>
set -euo pipefail

TF_VERSION=2.21.0
KERAS_VERSION=3.15.1

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TF_VENV=${LOCKSTEP_TF_VENV:-$REPO/.venv-bench-tf}
TORCH_VENV=${LOCKSTEP_TORCH_VENV:-$REPO/.venv-bench-torch}

log() { echo "[setup_peers] $*" >&2; }

setup_tf() {
  local py=$TF_VENV/bin/python marker=$TF_VENV/.lockstep-tf-ok
  local want="tensorflow-cpu==$TF_VERSION keras==$KERAS_VERSION"
  if [[ -x $py && "$(cat "$marker" 2>/dev/null)" == "$want" ]]; then return 0; fi
  log "setting up $TF_VENV ($want)"
  [[ -x $py ]] || "${PYTHON:-python3}" -m venv "$TF_VENV" >&2
  "$py" -m pip install -q --disable-pip-version-check "tensorflow-cpu==$TF_VERSION" \
    "keras==$KERAS_VERSION" numpy >&2
  # Keras 3 picks its backend from KERAS_BACKEND; check the versions and one conv step.
  KERAS_BACKEND=tensorflow "$py" - "$TF_VERSION" "$KERAS_VERSION" <<'EOF' >&2
import sys, numpy as np, tensorflow as tf, keras
assert tf.__version__ == sys.argv[1], tf.__version__
assert keras.__version__ == sys.argv[2], keras.__version__
m = keras.Sequential([keras.Input((5, 5, 1)), keras.layers.Conv2D(2, 3)])
m.compile(optimizer="sgd", loss="mse")
m.train_on_batch(np.zeros((1, 5, 5, 1), "float32"), np.zeros((1, 3, 3, 2), "float32"))
print("tensorflow", tf.__version__, "keras", keras.__version__, "ok")
EOF
  echo "$want" >"$marker"
}

find_jemalloc() {
  local p
  for p in /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 /usr/lib/libjemalloc.so.2 \
           /usr/lib64/libjemalloc.so.2; do
    [[ -e $p ]] && { echo "$p"; return 0; }
  done
  return 1
}

setup_jemalloc() {
  find_jemalloc && return 0
  log "installing libjemalloc2 (apt)"
  local sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  local install=("${sudo[@]}" apt-get install -y -q libjemalloc2)
  { "${install[@]}" >&2 || { "${sudo[@]}" apt-get update -q >&2 && "${install[@]}" >&2; }; } ||
    log "WARNING: libjemalloc2 not installed; PyTorch runs with glibc malloc (slower)"
  find_jemalloc || true
}

setup_tf
TORCH_PY=$(LOCKSTEP_VENV=$TORCH_VENV "$REPO/bench/setup_venv.sh")
JEMALLOC=$(setup_jemalloc)
echo "TF_PY=$TF_VENV/bin/python"
echo "TORCH_PY=$TORCH_PY"
echo "JEMALLOC=$JEMALLOC"
