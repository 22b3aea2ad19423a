#!/usr/bin/env bash
# GPU sessions behind docs/bench/unwrap.md. Expects the binaries on PATH (source
# .gpu-unwrap/env.sh after shared/tools/gpu-bundle) and writes to $OUT.
#
#   run_on_gpu.sh check   [gpu] tests (they cover each pairing mode and tile kernel themselves), one
#                         memcheck case, a short benchmark per configuration (--pairing, --tile-scan)
#   run_on_gpu.sh final   [gpu] tests and the benchmark in the default configuration (no switch
#                         set), CPU reference timed in the same run up to 4096^2
#   run_on_gpu.sh skimage scikit-image on the benchmark's inputs (after a bench with --npy-dir)
set -o pipefail
what=${1:-final}
out=${OUT:-/tmp/unwrap-out}
mkdir -p "$out" /tmp/npy
log=$out/log.txt
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee -a "$log"

gpu_tests() {  # name
  local name=$1
  echo "== [gpu] tests, $name" | tee -a "$log"
  local t0=$SECONDS
  timeout 90 test_unwrap "[gpu]~[.]" -d yes >"$out/gpu_$name.txt" 2>&1
  echo "rc=$? ($((SECONDS - t0)) s)" | tee -a "$log"
  grep -E "^[0-9.]+ s:|passed|failed|differ|FAILED|with expansion|error|graph|launches" -A1 "$out/gpu_$name.txt" |
    grep -v "^--" | head -40 | tee -a "$log"
}

case $what in
check)
  timeout 20 test_unwrap "~[gpu]" 2>&1 | tail -2 | tee -a "$log"
  gpu_tests all_modes
  echo "== memcheck (graph pairing, scan tiles)" | tee -a "$log"
  timeout 60 compute-sanitizer \
    --tool memcheck --error-exitcode 9 test_unwrap \
    "GPU Goldstein equals the CPU bit for bit on random phase" 2>&1 | tail -3 | tee -a "$log"
  for cfg in "graph 1" "graph 0" "launches 0"; do
    set -- $cfg
    echo "== bench subset, pairing $1, tile_scan $2" | tee -a "$log"
    timeout 60 fresnel_bench_unwrap --pairing "$1" --tile-scan "$2" \
      --sizes 1024,8192 --densities 1e-3 --reps 3 --cpu-max 1024 2>&1 |
      grep -E -A3 "^Goldstein|pairing graph|launches" | tee -a "$log"
  done
  ;;
final)
  timeout 20 test_unwrap "~[gpu]" 2>&1 | tail -2 | tee -a "$log"
  gpu_tests default
  echo "== memcheck (default configuration, masks)" | tee -a "$log"
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 test_unwrap \
    "GPU Goldstein equals the CPU with masks*" 2>&1 | tail -3 | tee -a "$log"
  echo "== bench (default configuration)" | tee -a "$log"
  timeout 200 fresnel_bench_unwrap --sizes 1024,4096,8192 --densities 0,1e-4,1e-3 --reps 5 \
    --cpu-max 4096 2>&1 | tee "$out/bench.txt" | grep -v "done:" | tail -40 | tee -a "$log"
  ;;
skimage)
  timeout 70 python3 "$here/bench_skimage.py" /tmp/npy 2>&1 | tee -a "$log"
  ;;
esac
