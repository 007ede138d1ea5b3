#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, then builds and runs the out-of-tree consumer
# (tests/install/consumer) twice: with find_package(Lockstep) and with pkg-config.
# Usage: install_and_consume.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/lockstep_install.XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/lib/cmake/Lockstep/LockstepConfig.cmake"
test -f "$prefix/lib/pkgconfig/lockstep.pc"
test -f "$prefix/include/lockstep/lockstep.h"
test -x "$prefix/bin/lockstep"
# The installed command line finds its libraries through its RPATH.
"$prefix/bin/lockstep" --help >/dev/null
# The program Lockstep reads HDF5 files in (src/io/h5_isolated.cpp) sits in the library's own
# folder, where the installed library looks for it.
test -x "$prefix/lib/lockstep/lockstep_h5_reader"

echo "== find_package(Lockstep)"
cmake -S "$here/consumer" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$work/cmake-build" -j 2 >/dev/null
"$work/cmake-build/consumer"

echo "== pkg-config lockstep"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# shellcheck disable=SC2046
g++ -std=c++20 -O1 "$here/consumer/main.cpp" -o "$work/consumer-pc" \
    $(pkg-config --cflags --libs lockstep)
"$work/consumer-pc"
