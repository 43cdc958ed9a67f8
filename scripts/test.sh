#!/usr/bin/env bash
# Quick start 2: build and run every test (CTest: C tests, golden bytes, CLI,
# OpenCL on PoCL where present; GPU tests skip cleanly without a GPU).
set -eu
cd "$(dirname "$0")/.."
# every ctest run's counts, summed into one closing line (also on failure)
PASSED=0 FAILED=0
summary() { echo "$PASSED passed, $FAILED failed"; }
trap summary EXIT
run_ctest() {
  local log rc line total failed
  log=$(mktemp)
  set +e
  ctest "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1)
  if [ -n "$line" ]; then
    failed=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) tests? failed out of ([0-9]+).*/\1/')
    total=$(echo "$line" | sed -E 's/.*failed out of ([0-9]+).*/\1/')
    PASSED=$((PASSED + total - failed))
    FAILED=$((FAILED + failed))
  elif [ "$rc" -ne 0 ]; then
    FAILED=$((FAILED + 1))
  fi
  rm -f "$log"
  return "$rc"
}
export KVC_WANT_SANITIZERS=${KVC_WANT_SANITIZERS:-1}
# Everything (PoCL for the OpenCL tests, clang for the sanitizer stage), else
# at least the core build dependencies.
KVC_WANT_OPENCL=${KVC_WANT_OPENCL:-1} scripts/setup-deps.sh ||
  KVC_WANT_OPENCL=0 KVC_WANT_SANITIZERS=0 scripts/setup-deps.sh
# Python test dependencies (the package itself is tested from the source tree):
# the system python3 if it has them, else a virtual environment of our own
# (build/venv), never the system interpreter's site-packages; a failure here
# stops the run instead of dropping the Python tests.
PY=python3
if ! python3 -c "import numpy, pytest, ml_dtypes" 2>/dev/null; then
  echo "-- Python test dependencies: virtual environment build/venv (numpy, pytest, ml_dtypes)"
  if [ ! -x build/venv/bin/python ]; then
    python3 -m venv build/venv ||
      { echo "error: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2; exit 1; }
  fi
  build/venv/bin/python -c "import numpy, pytest, ml_dtypes" 2>/dev/null ||
    build/venv/bin/python -m pip install -q numpy pytest ml_dtypes ||
    { echo "error: pip install numpy pytest ml_dtypes into build/venv failed" >&2; exit 1; }
  PY=$PWD/build/venv/bin/python
fi
# CUDA (where nvcc exists) is compiled for one architecture, the newest the
# project targets: a compile check of the CUDA code and the GPU tests of a
# Hopper machine; a release build takes every architecture
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE="$(command -v "$PY")" -DKVC_REQUIRE_PYTHON_TESTS=ON \
  -DKVC_CUDA_ARCHITECTURES="${KVC_TEST_CUDA_ARCHITECTURES:-90}"
cmake --build build -j "$(nproc)"
run_ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"

# Hardening (skip with KVC_WANT_SANITIZERS=0): the C suite again under
# AddressSanitizer + UndefinedBehaviorSanitizer (clang, CPU backend) with a
# 60-second libFuzzer smoke run, then the threading tests under ThreadSanitizer.
if [ "$KVC_WANT_SANITIZERS" = 1 ]; then
  if ! command -v clang >/dev/null 2>&1; then
    echo "WARNING: clang is missing, so the sanitizer and fuzzing stage is SKIPPED" >&2
    echo "         (install clang and libclang-rt-dev, or run with KVC_WANT_SANITIZERS=0 to silence this)" >&2
    exit 0
  fi
  fuzz=ON
  if ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n) { return 0; }' |
       clang -x c -fsanitize=fuzzer,address - -o /tmp/kvc-fuzz-probe 2>/dev/null; then
    echo "WARNING: clang has no libFuzzer runtime (libclang-rt-dev): the fuzz smoke run is SKIPPED" >&2
    fuzz=OFF
  fi
  CC=clang cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVC_CUDA=OFF \
    -DKVC_SANITIZE=address,undefined -DKVC_FUZZ=$fuzz >/dev/null
  cmake --build build-asan -j "$(nproc)"
  # (backends: the golden and semantics suites already run here; the whole matrix takes 6 minutes under ASan;
  # cpu_exp_all: the same comparison as units, at every argument instead of a stride)
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    run_ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -E '^(python|cli|install_consumer|opencl_gpu_paths_.*|opencl_no_hooks|backends|cpu_exp_all)$'
  CC=clang cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVC_CUDA=OFF \
    -DKVC_SANITIZE=thread >/dev/null
  cmake --build build-tsan -j "$(nproc)" --target test_threads test_semantics
  TSAN_OPTIONS=halt_on_error=1 run_ctest --test-dir build-tsan --output-on-failure -R '^(threads_cpu|semantics_cpu)$'
fi
