#!/usr/bin/env bash
# The Python side of the ONNX and TensorBoard interop tests: a venv with onnx, onnxruntime,
# tensorboard and numpy at ${LOCKSTEP_TOOLS_VENV:-<repo>/.venv-tools} (ignored by git, cached:
# returns at once when it already works). About 300 MB; the first run takes ~30 s with PyPI
# reachable. Progress goes to stderr; stdout is one line, the python interpreter to use. Exits 1
# with the reason when the venv cannot be made (no network, no python3-venv).
set -euo pipefail
PACKAGES=(${LOCKSTEP_TOOLS_PACKAGES:-onnx==1.23.2 onnxruntime==1.32.0 tensorboard==2.21.0 numpy})
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${LOCKSTEP_TOOLS_VENV:-$REPO/.venv-tools}
PY=$VENV/bin/python
MARKER=$VENV/.lockstep-tools-ok   # written only after the imports below worked
WANT="${PACKAGES[*]}"
log() { echo "[tools venv] $*" >&2; }

works() {
  "$PY" -c "import onnx, onnxruntime, numpy
from tensorboard.backend.event_processing import event_accumulator" >&2
}

if [[ -x $PY && "$(cat "$MARKER" 2>/dev/null)" == "$WANT" ]]; then
  echo "$PY"; exit 0
fi
# Several ctest tests share this venv and start side by side: the first to get here installs
# while the others wait on the lock, then find the marker (a second pip rewriting the .so files
# that a running test has mapped killed it with SIGBUS in CI).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [[ -x $PY && "$(cat "$MARKER" 2>/dev/null)" == "$WANT" ]]; then
  echo "$PY"; exit 0
fi
log "setting up $VENV ($WANT)"
if [[ ! -x $PY ]]; then
  "${PYTHON:-python3}" -m venv "$VENV" >&2 || { log "cannot create a venv (python3-venv missing?)"; exit 1; }
fi
if ! "$PY" -m pip install -q --disable-pip-version-check --timeout 20 --retries 1 "${PACKAGES[@]}" >&2; then
  log "pip install failed (is the package registry reachable?)"; exit 1
fi
works || { log "the installed packages do not import"; exit 1; }
echo "$WANT" > "$MARKER"
echo "$PY"
