#!/usr/bin/env bash
# The XLA backend's CPU PJRT plugin for tests: a venv with the PyPI package xla-cpu-pjrt at
# ${LOCKSTEP_XLA_VENV:-<repo>/.venv-xla} (ignored by git, cached: returns at once when the plugin
# is already there). The wheel is ~63 MB (259 MB unpacked); the first run takes ~20 s with PyPI
# reachable. It ships the plugin xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so (exports GetPjrtApi)
# and the header include/pjrt_c_api.h that CMake's LOCKSTEP_XLA option builds against.
#
# Progress goes to stderr; stdout is two lines: "plugin=<path>" and "header_dir=<dir>".
# Exits 1 with the reason when the venv cannot be made (no network, no python3-venv); the build
# then goes on without the XLA backend (scripts/setup.sh does not fail on it).
set -euo pipefail
PACKAGE=${LOCKSTEP_XLA_PACKAGE:-xla-cpu-pjrt==0.0.1}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${LOCKSTEP_XLA_VENV:-$REPO/.venv-xla}
PY=$VENV/bin/python
MARKER=$VENV/.lockstep-xla-ok  # written only after the plugin and header were found
log() { echo "[xla venv] $*" >&2; }

# The package's folder inside the venv (no python start-up: a glob over site-packages).
find_plugin_dir() {
  local d
  for d in "$VENV"/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt; do
    [[ -f $d/xla_cpu_pjrt.so && -f $d/include/pjrt_c_api.h ]] && { echo "$d"; return 0; }
  done
  return 1
}

report() {
  echo "plugin=$1/xla_cpu_pjrt.so"
  echo "header_dir=$1/include"
}

if [[ "$(cat "$MARKER" 2>/dev/null)" == "$PACKAGE" ]] && dir=$(find_plugin_dir); then
  report "$dir"; exit 0
fi
log "setting up $VENV ($PACKAGE)"
if [[ ! -x $PY ]]; then
  "${PYTHON:-python3}" -m venv "$VENV" >&2 || { log "cannot create a venv (python3-venv missing?)"; exit 1; }
fi
if ! "$PY" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 "$PACKAGE" >&2; then
  log "pip install $PACKAGE failed (is the package registry reachable?)"; exit 1
fi
dir=$(find_plugin_dir) || { log "$PACKAGE installed but xla_cpu_pjrt.so or include/pjrt_c_api.h is missing"; exit 1; }
echo "$PACKAGE" > "$MARKER"
report "$dir"
