#!/usr/bin/env bash
# ctest "tensorboard_interop" (label interop): sets up the cached tools venv (tests/interop/
# setup_tools_venv.sh: tensorboard), then runs the TensorBoardInterop gtest, which trains a
# small model with the TensorBoard callback and reads the event files back through
# tests/interop/tensorboard_read.py (tensorboard's EventAccumulator). Exits 77 (ctest:
# skipped) with the reason when the venv cannot be made.
#   run_tensorboard_interop.sh <lockstep_tests binary>
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS=${1:?usage: run_tensorboard_interop.sh <lockstep_tests binary>}
if ! PY=$("$HERE/setup_tools_venv.sh"); then
  echo "SKIPPED: tensorboard interop: could not set up the tensorboard venv (see the messages above)"
  exit 77
fi
export LOCKSTEP_TB_PYTHON=$PY
exec "$TESTS" --gtest_filter='TensorBoardInterop.*'
