#!/usr/bin/env bash
# `make docs`: the API reference. Runs Doxygen (docs/api/Doxyfile) over include/lockstep/ into
# build-docs/html, then lists every warning (an undocumented public class, function, member or
# enumerator, or a malformed doc comment) by file and fails when there is any.
#
# ctest runs it too (docs_api_reference, label docs) with DOCS_OUT=<build>/docs-api, and
# (docs_api_reference_rejects_undocumented) with DOCS_INPUT=tests/docs/fixtures/undocumented.h
# to show that an undocumented symbol fails it.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v doxygen >/dev/null || { echo "docs: doxygen is not installed (./scripts/setup.sh)"; exit 1; }
out=${DOCS_OUT:-build-docs}
mkdir -p "$out"
log=$out/warnings.log
rm -f "$log"
{
  cat docs/api/Doxyfile
  echo "OUTPUT_DIRECTORY = $out"
  echo "WARN_LOGFILE = $log"
  [ -z "${DOCS_INPUT:-}" ] || echo "INPUT = $DOCS_INPUT"
} | doxygen -
status=$?
if [ -s "$log" ]; then
  sed "s|$PWD/||" "$log"
  echo
  echo "docs: $(wc -l < "$log") Doxygen warning(s), by file:"
  sed "s|$PWD/||" "$log" | cut -d: -f1 | sort | uniq -c | sort -rn
  echo "docs: FAILED (document them with /// comments: what, shapes in and out, defaults)"
  exit 1
fi
[ "$status" -eq 0 ] || { echo "docs: doxygen failed (exit $status)"; exit "$status"; }
echo "docs: the API reference has no warnings: $out/html/index.html"
