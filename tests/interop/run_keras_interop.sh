#!/usr/bin/env bash
# ctest "keras_interop" (label interop): sets up the cached Keras venv (tests/interop/
# setup_venv.sh), then runs the KerasInterop gtest, which drives tests/interop/keras_interop.py
# (or the gtests FILTER names: ctest "applications_interop" runs ApplicationsInterop.*).
# Exits 77 (ctest: skipped) with the reason when the venv cannot be made.
#   run_keras_interop.sh <lockstep_tests binary> [gtest filter, default KerasInterop.*]
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TESTS=${1:?usage: run_keras_interop.sh <lockstep_tests binary> [gtest filter]}
FILTER=${2:-KerasInterop.*}
if ! PY=$("$HERE/setup_venv.sh"); then
  echo "SKIPPED: keras interop: could not set up the Keras venv (see the messages above)"
  exit 77
fi
export LOCKSTEP_INTEROP_PYTHON=$PY
exec "$TESTS" --gtest_filter="$FILTER"
