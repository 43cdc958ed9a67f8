#!/usr/bin/env bash
# Quick start 1: build, then run the main job `kvcompress bench` (the 12
# headline cases, both block-table layouts) on the best backend here: CUDA
# when a GPU and nvcc are present, else the CPU.  Extra arguments go to bench.
set -eu
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
# CUDA only where there is a GPU to run it (compiling it takes most of the build)
cuda=OFF
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then cuda=AUTO; fi
echo "-- configuring (CUDA backend: $cuda)"
cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DKVC_CUDA=$cuda -DKVC_BUILD_TESTS=OFF >/dev/null
echo "-- building kvcompress (the CLI only; log: build-bench/build.log)"
set +e
cmake --build build-bench -j "$(nproc)" --target kvcompress_cli 2>&1 | tee build-bench/build.log |
  grep --line-buffered -E '^\[ *[0-9]+%\]|error'
rc=${PIPESTATUS[0]}
set -e
[ "$rc" = 0 ] || { echo "error: the build failed (build-bench/build.log)" >&2; exit 1; }
exec build-bench/tools/kvcompress bench "$@"
