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
# PENDING (docs/api/pending.txt): headers whose documentation is not written yet. Their
# warnings are counted and listed by file but do not fail `make test` (DOCS_STRICT=1, as
# `make docs` sets, fails on them too); a warning in any other header always fails.
pending=docs/api/pending.txt
if [ -s "$log" ] && [ "${DOCS_STRICT:-0}" != 1 ] && [ -f "$pending" ]; then
  others=$(sed "s|$PWD/||" "$log" | grep -v -F -f <(grep -v '^#' "$pending" | sed '/^$/d') || true)
  if [ -z "$others" ]; then
    echo "docs: $(wc -l < "$log") warning(s), all in the headers docs/api/pending.txt lists:"
    sed "s|$PWD/||" "$log" | cut -d: -f1 | sort | uniq -c | sort -rn
    echo "docs: OK for make test (make docs, strict, still fails on them)"
    exit 0
  fi
  echo "$others"
  echo "docs: FAILED: warnings outside the pending headers (document them with /// comments)"
  exit 1
fi
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
