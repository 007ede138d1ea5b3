#!/usr/bin/env bash
# ctest "onnx_interop" (label interop): sets up the cached tools venv (tests/interop/
# setup_tools_venv.sh: onnx, onnxruntime), then runs the OnnxInterop gtest, which exports the
# test models and drives tests/interop/onnx_interop.py. Exits 77 (ctest: skipped) with the
# reason when the venv cannot be made.
#   run_onnx_interop.sh <lockstep_tests binary> [gtest filter, default OnnxInterop.*]
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS=${1:?usage: run_onnx_interop.sh <lockstep_tests binary> [gtest filter]}
FILTER=${2:-OnnxInterop.*}
if ! PY=$("$HERE/setup_tools_venv.sh"); then
  echo "SKIPPED: onnx interop: could not set up the onnx/onnxruntime venv (see the messages above)"
  exit 77
fi
export LOCKSTEP_ONNX_PYTHON=$PY
exec "$TESTS" --gtest_filter="$FILTER"
