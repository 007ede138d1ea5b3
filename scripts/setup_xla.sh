#!/usr/bin/env bash
# The XLA backend's CPU PJRT plugin for tests: a venv with the PyPI package xla-cpu-pjrt at
# ${LOCKSTEP_XLA_VENV:-<repo>/.venv-xla} (ignored by git, cached: returns at once when the plugin
# is already there). The wheel is ~63 MB (259 MB unpacked); the first run takes ~20 s with PyPI
# reachable. It ships the plugin xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so (exports GetPjrtApi)
# and the header include/pjrt_c_api.h that CMake's LOCKSTEP_XLA option builds against.
#
# Progress goes to stderr; stdout is two lines: "plugin=<path>" and "header_dir=<dir>".
# Exit status: 0 when the plugin is there; 75 (EX_TEMPFAIL) when the install failed and the
# package index does not answer either (no network: the build may go on without the XLA backend);
# 1, with the reason, for every other failure (no python3-venv, an index that answers but an
# install that fails, a wheel without the plugin), which scripts/setup.sh turns into a failed
# set-up. PYTHON picks the interpreter that makes the venv (default python3).
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
# A venv without a working pip (left by a python3 -m venv that failed for want of ensurepip,
# i.e. of Debian's python3-venv) is made again.
if [[ -x $PY ]] && ! "$PY" -m pip --version >/dev/null 2>&1; then
  if [[ -L $VENV ]]; then
    log "$VENV is a link to a venv without pip; remove it or point LOCKSTEP_XLA_VENV elsewhere"
    exit 1
  fi
  log "$VENV has no pip (an earlier venv creation failed); making it again"
  rm -rf "$VENV"
fi
if [[ ! -x $PY ]]; then
  if ! "${PYTHON:-python3}" -m venv "$VENV" >&2 || ! "$PY" -m pip --version >/dev/null 2>&1; then
    log "cannot create a venv with pip at $VENV using ${PYTHON:-python3}: on Debian, install"
    log "python3-venv (apt-get install python3-venv; scripts/setup.sh does), then run this again"
    [[ -L $VENV ]] || rm -rf "$VENV"
    exit 1
  fi
fi
if ! "$PY" -m pip install -q --disable-pip-version-check --timeout 30 --retries 2 "$PACKAGE" >&2; then
  # Which failure: does the package index answer at all? Asked for pip itself, which every index
  # has, with pip's own index and proxy settings, a short timeout and no retries.
  if "$PY" -m pip index versions pip --disable-pip-version-check --timeout 10 --retries 0 \
      >/dev/null 2>&1; then
    log "pip install $PACKAGE failed although the package index answers (see pip's error above)"
    exit 1
  fi
  log "pip install $PACKAGE failed and the package index does not answer: no network?"
  exit 75
fi
dir=$(find_plugin_dir) || { log "$PACKAGE installed but xla_cpu_pjrt.so or include/pjrt_c_api.h is missing"; exit 1; }
echo "$PACKAGE" > "$MARKER"
report "$dir"
