#!/usr/bin/env bash
# Quick start 2: build and run every test (CTest: C tests, golden bytes, CLI,
# OpenCL on PoCL where present; GPU tests skip cleanly without a GPU).
set -eu
cd "$(dirname "$0")/.."
KVC_WANT_OPENCL=${KVC_WANT_OPENCL:-0} scripts/setup-deps.sh || KVC_WANT_OPENCL=0 scripts/setup-deps.sh
# Python test dependencies (the package itself is tested from the source tree)
python3 -c "import numpy, pytest, ml_dtypes" 2>/dev/null ||
  python3 -m pip install -q numpy pytest ml_dtypes ||
  echo "warning: could not pip install numpy pytest ml_dtypes: the Python tests will not run" >&2
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
