#!/usr/bin/env bash
# `make docs`: the API reference. Runs Doxygen (docs/api/Doxyfile) over include/lockstep/ into
# build-docs/html, then lists every warning (an undocumented public class, function, member or
# enumerator, or a malformed doc comment) by file and fails when there is any.
set -uo pipefail
cd "$(dirname "$0")/.."
command -v doxygen >/dev/null || { echo "docs: doxygen is not installed (./scripts/setup.sh)"; exit 1; }
mkdir -p build-docs
rm -f build-docs/warnings.log
doxygen docs/api/Doxyfile
status=$?
log=build-docs/warnings.log
if [ -s "$log" ]; then
  sed "s|$PWD/||" "$log"
  echo
  echo "docs: $(wc -l < "$log") Doxygen warning(s), by file:"
  sed "s|$PWD/||" "$log" | cut -d: -f1 | sort | uniq -c | sort -rn
  echo "docs: FAILED (document them with /// comments: what, shapes in and out, defaults)"
  exit 1
fi
[ "$status" -eq 0 ] || { echo "docs: doxygen failed (exit $status)"; exit "$status"; }
echo "docs: the API reference has no warnings: build-docs/html/index.html"
