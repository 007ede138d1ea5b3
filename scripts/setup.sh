#!/usr/bin/env bash
# Installs the Debian packages Lockstep needs, only those that are missing (idempotent, fast
# when everything is present). Run as root or with sudo available.
set -euo pipefail
PACKAGES=(cmake make g++ pkg-config zlib1g-dev libdnnl-dev libgtest-dev googletest
          nlohmann-json3-dev dataset-fashion-mnist libturbojpeg0-dev libpng-dev
          libgloo-dev libopenmpi-dev openmpi-bin iproute2
          libhdf5-dev libzip-dev
          libjemalloc2  # preloaded under PyTorch by bench/run_peer_bench.sh
          libonnx-dev libprotobuf-dev protobuf-compiler  # ONNX export, TensorBoard event files
          python3 openssl doxygen  # the docs checks (tests/docs), make docs
          clang libclang-rt-14-dev libomp-14-dev)  # clang: the libFuzzer targets (make fuzz)
# The XLA backend's CPU PJRT plugin and its header, in a cached venv (.venv-xla); without it
# the build leaves the XLA backend out, so a failure here is reported, not fatal.
"$(dirname "$0")/setup_xla.sh" >/dev/null || echo "setup: no XLA CPU plugin (see above); building without the XLA backend"
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || echo "setup: apt-get update failed; trying the cached package lists"
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
