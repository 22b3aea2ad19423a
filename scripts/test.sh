#!/usr/bin/env bash
# Builds everything (with CUDA when nvcc is found) and runs the whole test suite.
# GPU test cases skip themselves when no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${FRESNEL_BUILD_DIR:-build}
jobs=${FRESNEL_JOBS:-$(nproc)}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
start=$(date +%s)
cmake --build "$build" -j "$jobs"
echo "build: $(( $(date +%s) - start )) s"
ctest --test-dir "$build" --output-on-failure -j "$jobs"
