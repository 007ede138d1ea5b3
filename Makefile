# Thin wrapper over the CMake presets. `make demo` and `make test` install what is missing,
# build, and run; both are fast when nothing changed.
JOBS ?= $(shell nproc)
# Fuzzing: `make fuzz` runs every libFuzzer target (tests/fuzz) FUZZ_SECONDS each (default
# 600); `make test` runs each TEST_FUZZ_SECONDS (default 10) after the other tests.
FUZZ_SECONDS ?= 600
TEST_FUZZ_SECONDS ?= 10
# Targets `make test` leaves out (none now). keras_weights_fuzz was left out while crafted
# .weights.h5 files crashed libhdf5 1.10.8 itself; HDF5 files are now parsed by a separate reader
# program (lockstep_h5_reader, src/io/h5_isolated.cpp), where such a crash is an error naming the
# file.
TEST_FUZZ_SKIP ?=
# make test-under-load: the release suite beside LOAD_BURNERS CPU-burning loops (default one per
# core); LOAD_TESTS, a ctest -R regex, runs part of it (scripts/test_under_load.sh).
LOAD_BURNERS ?= $(shell nproc)
LOAD_TESTS ?=
.PHONY: setup build demo test test-release test-under-load test-asan test-fuzz fuzz fuzz-build bench package docs docs-check clean

setup:
	@./scripts/setup.sh

build: setup
	@cmake --preset release >/dev/null
	@cmake --build build -j $(JOBS)

demo: build
	./build/bin/fashion_mnist $(ARGS)

# The release suite, then every skipped test with its reason: a skip not on
# tests/skip_allowlist.txt fails the target (scripts/check_skips.py; docs/architecture.md).
test-release: build
	@rc=0; ctest --preset release -j $(JOBS) --output-junit $(CURDIR)/build/ctest-release.xml || rc=$$?; \
	python3 scripts/check_skips.py build/ctest-release.xml tests/skip_allowlist.txt || rc=1; exit $$rc

test-under-load: build
	@./scripts/test_under_load.sh $(LOAD_BURNERS) $(JOBS) '$(LOAD_TESTS)'

test-asan: setup
	@cmake --preset asan >/dev/null
	@cmake --build build-asan -j $(JOBS) --target lockstep_tests
	ctest --preset asan -j $(JOBS) -LE 'slow|interop'

fuzz-build: setup
	@cmake --preset fuzz >/dev/null
	@cmake --build build-fuzz -j $(JOBS)

fuzz: fuzz-build
	./tests/fuzz/run_fuzz.sh build-fuzz $(FUZZ_SECONDS) $(JOBS)

test-fuzz: fuzz-build
	FUZZ_SKIP="$(TEST_FUZZ_SKIP)" ./tests/fuzz/run_fuzz.sh build-fuzz $(TEST_FUZZ_SECONDS) $(JOBS)

test: test-release test-asan test-fuzz docs-check

# The API reference (Doxygen over include/lockstep/) in build-docs/html; fails on any undocumented
# public symbol. `make test` runs it last.
docs: setup
	@./scripts/api_docs.sh

# make test's API check: the same strict run as `make docs` (every public symbol documented).
docs-check: docs

# A .deb of the library, headers, CMake package and `lockstep` tool, built for any x86-64 CPU.
package: setup
	@cmake -S . -B build-package -DCMAKE_BUILD_TYPE=Release -DLOCKSTEP_NATIVE=OFF -DLOCKSTEP_BUILD_TESTS=OFF >/dev/null
	@cmake --build build-package -j $(JOBS)
	cd build-package && cpack -G DEB

# Lockstep vs Keras/TensorFlow and PyTorch (fp32 and bf16; installs the peers on first use).
# BENCH_ARGS="ROUNDS THREADS" (default 3 2); bench/run_peer_bench.sh lists its environment knobs.
bench: build
	./bench/run_peer_bench.sh $(BENCH_ARGS)

clean:
	rm -rf build build-asan build-tsan build-debug build-package build-fuzz build-docs
