#!/usr/bin/env bash
# ctest "op_ids_typed": the IR takes op ids the compiler knows. A node added with an op id
# compiles; the same node added with the op's name as a string does not, and neither does a
# comparison of a node's op with a string. Usage: op_id_check.sh CXX INCLUDE_DIR
set -uo pipefail
CXX=$1
INC=$2
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
compile() {
  printf '#include "lockstep/graph/graph.h"\nusing namespace lockstep;\nbool f(Graph& g, Value x) {\n  %s\n}\n' "$1" > "$TMP/t.cpp"
  "$CXX" -std=c++20 -fsyntax-only -I "$INC" "$TMP/t.cpp" 2>"$TMP/err"
}
fail=0
if ! compile 'return g.add(op::relu, {x}).valid() && g.node(0).op == op::relu;'; then
  echo "FAIL: a node added with op::relu does not compile:"; head -5 "$TMP/err"; fail=1
else
  echo "ok: g.add(op::relu, ...) and n.op == op::relu compile"
fi
for mutant in 'return g.add("relu", {x}).valid();' 'return g.node(0).op == "relu";' \
              'Node n; n.op = std::string("relu"); return true;'; do
  if compile "$mutant"; then
    echo "FAIL: '$mutant' compiled (an op named by a string)"; fail=1
  else
    echo "ok: '$mutant' is refused by the compiler"
  fi
done
exit $fail
