#!/usr/bin/env bash
# Installs the Debian packages Lockstep needs, only those that are missing (idempotent, fast
# when everything is present), then the XLA backend's CPU plugin into a cached venv. Run as
# root or with sudo available.
#
# The order matters on a fresh Debian 12: the venvs (.venv-xla here; the interop and benchmark
# venvs later) need python3-venv, so the packages come first. The XLA step then fails the
# set-up, loudly, unless the only cause is that the package index cannot be reached (no
# network), in which case the build goes on without the XLA backend and says so.
set -euo pipefail
PACKAGES=(cmake make g++ pkg-config zlib1g-dev libdnnl-dev libgtest-dev googletest
          nlohmann-json3-dev dataset-fashion-mnist libturbojpeg0-dev libpng-dev
          fortunes  # labelled text: the text classification job (lockstep export-text-folder)
          libgloo-dev libopenmpi-dev openmpi-bin iproute2
          libhdf5-dev libzip-dev
          libjemalloc2  # preloaded under PyTorch by bench/run_peer_bench.sh
          libonnx-dev libprotobuf-dev protobuf-compiler  # ONNX export, TensorBoard event files
          python3 python3-venv  # the venvs: .venv-xla (below), the interop and bench venvs
          openssl doxygen  # the docs checks (tests/docs), make docs
          clang libclang-rt-14-dev libomp-14-dev)  # clang: the libFuzzer targets (make fuzz)

install_missing() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq || echo "setup: apt-get update failed; trying the cached package lists"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The XLA backend's CPU PJRT plugin and its header, in a cached venv (.venv-xla, or
# $LOCKSTEP_XLA_VENV). scripts/setup_xla.sh exits 75 only when the package index does not answer.
setup_xla() {
  local rc=0
  "$(dirname "$0")/setup_xla.sh" >/dev/null || rc=$?
  case $rc in
    0) ;;
    75) echo "setup: the package index cannot be reached, so there is no XLA CPU plugin; building" \
             "without the XLA backend (run make again with the network to add it)" >&2 ;;
    *) echo "setup: FAILED to set up the XLA CPU plugin (scripts/setup_xla.sh exit $rc; its" \
            "reason is above); this is not a network failure." >&2
       exit 1 ;;
  esac
}

install_missing
setup_xla
