#!/usr/bin/env bash
# ctest "backend_interface": the Backend interface is a contract the compiler enforces. A
# backend implementing every pure virtual compiles; the same backend with any one virtual
# removed does not (it stays abstract, and registering it fails to compile). Usage:
#   backend_interface_check.sh CXX INCLUDE_DIR
set -uo pipefail
CXX=$1
INC=$2
HERE=$(cd "$(dirname "$0")" && pwd)
FIXTURE=$HERE/backend_fixtures/complete_backend.cpp
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
compile() { "$CXX" -std=c++20 -fsyntax-only -I "$INC" "$1" 2>"$TMP/err"; }
if ! compile "$FIXTURE"; then
  echo "FAIL: the complete fixture backend does not compile:"; cat "$TMP/err"; exit 1
fi
fail=0
for virt in 'std::string name() const override' 'std::string doc() const override' \
            'bool can_run(' 'void run_passes(' 'bool splits_batch_over_host_threads() const override' \
            'std::unique_ptr<lockstep::CompiledGraph> compile('; do
  # Drop the member whose declaration starts with $virt (through its closing brace line).
  awk -v v="$virt" '
    index($0, v) && !skip { skip = 1 }
    skip { if ($0 ~ /^  }$/ || $0 ~ /\{ return .*; \}$/ || $0 ~ /\{\}$/) { skip = 0 }; next }
    { print }' "$FIXTURE" > "$TMP/mutant.cpp"
  if cmp -s "$FIXTURE" "$TMP/mutant.cpp"; then
    echo "FAIL: could not remove '$virt' from the fixture"; fail=1; continue
  fi
  if compile "$TMP/mutant.cpp"; then
    echo "FAIL: a backend without '$virt' compiled"; fail=1
  elif ! grep -q "abstract" "$TMP/err"; then
    echo "FAIL: a backend without '$virt' failed for another reason:"; head -5 "$TMP/err"; fail=1
  else
    echo "ok: a backend without '$virt' is refused (abstract)"
  fi
done
exit $fail
