#!/usr/bin/env bash
# The Python side of the Keras interop test: a venv with Keras 3 on JAX (CPU), h5py and numpy,
# and TensorFlow (tensorflow-cpu: Keras's TextVectorization and the string models of
# keras_text_interop run on it), and keras-hub (KerasHub's layers and backbones for
# keras_hub_interop; installed without its declared dependencies tensorflow-text, which would pull
# the full `tensorflow` wheel beside tensorflow-cpu, and kagglehub/kagglesdk/sentencepiece, which
# only preset downloads and SentencePiece tokenizers need; keras_hub imports with regex and
# tokenizers)
# at ${LOCKSTEP_INTEROP_VENV:-<repo>/.venv-interop} (ignored by git, cached: returns at once
# when it already works). About 700 MB; the first run takes ~1-2 minutes with PyPI reachable.
# Progress goes to stderr; stdout is one line, the python interpreter to use. Exits 1 with the
# reason when the venv cannot be made (no network, no python3-venv).
set -euo pipefail
KERAS_VERSION=${LOCKSTEP_KERAS_VERSION:-3.15.1}
KERAS_HUB_VERSION=${LOCKSTEP_KERAS_HUB_VERSION:-0.32.0}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV=${LOCKSTEP_INTEROP_VENV:-$REPO/.venv-interop}
PY=$VENV/bin/python
MARKER=$VENV/.lockstep-interop-ok   # written only after the imports below worked
STAMP="$KERAS_VERSION+tensorflow+keras_hub$KERAS_HUB_VERSION"   # what the marker holds (an older venv updates)
log() { echo "[interop venv] $*" >&2; }

works() {
  KERAS_BACKEND=jax "$PY" -c "import keras, jax, h5py, numpy, tensorflow, keras_hub; assert keras.__version__ == '$KERAS_VERSION', keras.__version__; assert keras_hub.__version__ == '$KERAS_HUB_VERSION', keras_hub.__version__" >&2
}

if [[ -x $PY && "$(cat "$MARKER" 2>/dev/null)" == "$STAMP" ]]; then
  echo "$PY"; exit 0
fi
# Several ctest tests share this venv and start side by side: the first to get here installs
# while the others wait on the lock, then find the marker (a second pip rewriting the .so files
# that a running test has mapped killed it with SIGBUS in CI).
mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if [[ -x $PY && "$(cat "$MARKER" 2>/dev/null)" == "$STAMP" ]]; then
  echo "$PY"; exit 0
fi
log "setting up $VENV (keras==$KERAS_VERSION, jax, h5py, numpy, tensorflow-cpu, keras-hub==$KERAS_HUB_VERSION)"
if [[ ! -x $PY ]]; then
  "${PYTHON:-python3}" -m venv "$VENV" >&2 || { log "cannot create a venv (python3-venv missing?)"; exit 1; }
fi
if ! "$PY" -m pip install -q --disable-pip-version-check --timeout 20 --retries 1 \
     "keras==$KERAS_VERSION" jax h5py numpy tensorflow-cpu >&2; then
  log "pip install failed (is the package registry reachable?)"; exit 1
fi
if ! "$PY" -m pip install -q --disable-pip-version-check --timeout 20 --retries 1 \
     regex tokenizers >&2 ||
   ! "$PY" -m pip install -q --disable-pip-version-check --timeout 20 --retries 1 --no-deps \
     "keras-hub==$KERAS_HUB_VERSION" >&2; then
  log "pip install of keras-hub failed (is the package registry reachable?)"; exit 1
fi
works || { log "the installed packages do not import"; exit 1; }
echo "$STAMP" > "$MARKER"
echo "$PY"
