#!/usr/bin/env bash
# The GPU session behind docs/bench/unwrap.md: CPU tests, [gpu] tests in each kernel
# configuration, compute-sanitizer, the benchmark and scikit-image on the same inputs. Expects the
# binaries on PATH (source .gpu-unwrap/env.sh after shared/tools/gpu-bundle) and writes to $OUT.
set -o pipefail
out=${OUT:-/tmp/unwrap-out}
mkdir -p "$out" /tmp/npy
log=$out/log.txt
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv | tee "$log"
timeout 20 test_unwrap "~[gpu]" 2>&1 | tail -2 | tee -a "$log"
for cfg in default FRESNEL_UNWRAP_NO_COOPERATIVE FRESNEL_UNWRAP_TILE_SCAN; do
  echo "== [gpu] tests, $cfg" | tee -a "$log"
  if [ $cfg = default ]; then env=(); else env=("$cfg=1"); fi
  env "${env[@]}" timeout 60 test_unwrap "[gpu]" -d yes >"$out/gpu_$cfg.txt" 2>&1
  echo "rc=$?" | tee -a "$log"
  grep -E "^[0-9.]+ s:|passed|failed|differ|FAILED|with expansion" -A1 "$out/gpu_$cfg.txt" | grep -v "^--" | head -40 | tee -a "$log"
done
for cfg in coop sep; do
  if [ $cfg = coop ]; then env=(); else env=(FRESNEL_UNWRAP_NO_COOPERATIVE=1); fi
  env "${env[@]}" FRESNEL_UNWRAP_DEBUG_DUMP="$out/dump_$cfg.bin" timeout 30 test_unwrap \
    "GPU mask diagnostics" -s 2>&1 | grep -E "cpu:|gpu:" | tee -a "$log"
done
echo "== memcheck" | tee -a "$log"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 test_unwrap \
  "GPU Goldstein equals the CPU with masks, quality maps and seeds" 2>&1 | tail -4 | tee -a "$log"
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 test_unwrap \
  "GPU Goldstein equals the CPU bit for bit on random phase" 2>&1 | tail -3 | tee -a "$log"
echo "== bench" | tee -a "$log"
timeout 130 fresnel_bench_unwrap --npy-dir /tmp/npy 2>&1 | tee "$out/bench.txt" | tail -42 | tee -a "$log"
for cfg in FRESNEL_UNWRAP_NO_COOPERATIVE FRESNEL_UNWRAP_TILE_SCAN; do
  echo "== bench subset, $cfg=1" | tee -a "$log"
  env "$cfg=1" timeout 40 fresnel_bench_unwrap --sizes 1024,8192 --densities 1e-3 --reps 3 \
    --cpu-max 0 2>&1 | grep -A4 "^Goldstein" | tee -a "$log"
done
echo "== scikit-image" | tee -a "$log"
timeout 70 python3 "$here/bench_skimage.py" /tmp/npy 2>&1 | tee -a "$log"
