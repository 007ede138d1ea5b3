#!/usr/bin/env bash
# Runs every libFuzzer target of a fuzz build (cmake --preset fuzz) for SECONDS each, JOBS at a
# time, starting from its committed seed corpus (tests/fuzz/corpus/<target>/) and its crash
# regressions (tests/fuzz/regressions/<target>/, inputs that once failed: each must pass now),
# with the dictionary tests/fuzz/<target>.dict where there is one (keras_config_fuzz).
# New interesting inputs go to BUILD/fuzz-corpus/<target>/ (kept between runs, never into the
# source tree); a failure's input to BUILD/fuzz-artifacts/<target>/. Prints executions per
# target; exits 1 when any target found something (its log is printed).
#   [FUZZ_SKIP="a_fuzz b_fuzz"] run_fuzz.sh BUILD_DIR SECONDS [JOBS]
set -uo pipefail
build=${1:?usage: run_fuzz.sh BUILD_DIR SECONDS [JOBS]}
seconds=${2:?usage: run_fuzz.sh BUILD_DIR SECONDS [JOBS]}
jobs=${3:-1}
src=$(cd "$(dirname "$0")" && pwd)
targets=()
# FUZZ_SKIP: target names to leave out (the Makefile's TEST_FUZZ_SKIP, empty by default).
for bin in "$build"/bin/*_fuzz; do
  name=$(basename "$bin")
  [[ " ${FUZZ_SKIP:-} " == *" $name "* ]] && { echo "fuzz: $name skipped (FUZZ_SKIP)"; continue; }
  [ -x "$bin" ] && targets+=("$name")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "run_fuzz: no *_fuzz binaries in $build/bin (cmake --preset fuzz && cmake --build build-fuzz)"
  exit 1
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
# A crafted HDF5 file can keep libhdf5 (in the reader process, src/io/h5_isolated.cpp) busy for
# minutes: after 3 s of silence the reader is stopped and the read is an error naming the file,
# well inside libFuzzer's 10 s -timeout, as a crash of libhdf5 is an error and not a finding.
export LOCKSTEP_H5_READER_SILENCE=${LOCKSTEP_H5_READER_SILENCE:-3}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Leaks that libhdf5 makes in its own error paths are not findings (hdf5_leaks.supp says why).
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$src/hdf5_leaks.supp:print_suppressions=0}

run_one() {
  local name=$1 corpus=$build/fuzz-corpus/$1 artifacts=$build/fuzz-artifacts/$1
  mkdir -p "$corpus" "$artifacts"
  # The IDX reader inflates gzip streams: give it a gzip copy of each committed seed (no
  # compressed file is committed).
  if [ "$name" = idx_fuzz ]; then
    for seed in "$src/corpus/idx"/*.idx; do gzip -n -c "$seed" >"$corpus/$(basename "$seed").gz"; done
  fi
  local dirs=("$corpus" "$src/corpus/${name%_fuzz}")
  [ -d "$src/regressions/${name%_fuzz}" ] && dirs+=("$src/regressions/${name%_fuzz}")
  # keras_weights: HDF5's metadata cache (H5C_protect) asks malloc for sizes read from the file
  # (1e18 bytes); malloc refuses them and HDF5 returns an error, as in production. Let such
  # requests fail instead of counting them as findings; the RSS limit still bounds real use.
  # (libhdf5 runs in the reader program lockstep_h5_reader, src/io/h5_isolated.cpp: its crashes are
  # errors naming the file, not findings; ASan reports from Lockstep's code there still are.)
  local extra=() asan=$ASAN_OPTIONS
  if [ "$name" = keras_weights_fuzz ]; then
    extra=(-malloc_limit_mb=1000000000)
    asan=${asan/allocator_may_return_null=0/allocator_may_return_null=1}
  fi
  # A dictionary of JSON tokens, Keras config keys and class names (tests/fuzz/<corpus>.dict),
  # for the targets that read a model config as JSON text.
  [ -f "$src/${name%_fuzz}.dict" ] && extra+=(-dict="$src/${name%_fuzz}.dict")
  TMPDIR=$corpus/.. ASAN_OPTIONS=$asan "$build/bin/$name" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 "${extra[@]}" -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "${dirs[@]}" >"$build/fuzz-$name.log" 2>&1
  echo $? >"$build/fuzz-$name.status"
}
export -f run_one
export build seconds src
start=$(date +%s)
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}'
status=0
printf 'fuzz: %-22s %12s %10s %s\n' target executions exec/s result
for name in "${targets[@]}"; do
  log=$build/fuzz-$name.log
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  result=ok
  if [ "$(cat "$build/fuzz-$name.status" 2>/dev/null)" != 0 ] || grep -qE '^==[0-9]+==ERROR|runtime error:|deadly signal|uncaught exception|out-of-memory|timeout after|SUMMARY: libFuzzer' "$log" || [ -z "$execs" ]; then
    result=FAILED
    status=1
  fi
  printf 'fuzz: %-22s %12s %10s %s\n' "$name" "${execs:-?}" "${rate:-?}" "$result"
done
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, $jobs at a time: $(( $(date +%s) - start )) s"
if [ $status -ne 0 ]; then
  for name in "${targets[@]}"; do
    log=$build/fuzz-$name.log
    if [ "$(cat "$build/fuzz-$name.status" 2>/dev/null)" != 0 ] ||
       grep -qE '^==[0-9]+==ERROR|runtime error:|deadly signal|uncaught exception|out-of-memory|timeout after|SUMMARY: libFuzzer' "$log"; then
      echo "---- $name ($log); inputs in $build/fuzz-artifacts/$name/"
      tail -60 "$log"
    fi
  done
fi
exit $status
