#!/usr/bin/env bash
# Quick start 1: build, then run the main job `kvcompress bench` (the 12
# headline cases, both block-table layouts) on the best backend here: CUDA
# when a GPU and nvcc are present, else the CPU.  Extra arguments go to bench.
set -eu
cd "$(dirname "$0")/.."
scripts/setup-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target kvcompress_cli >/dev/null
exec build/tools/kvcompress bench "$@"
