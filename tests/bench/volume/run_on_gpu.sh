#!/usr/bin/env bash
# The GPU session behind docs/volume.md: [gpu] tests, one memcheck case, the benchmark. Expects the
# binaries on PATH and the data under $1/volume (a gpu-bundle with --data .../volume), writes $OUT.
set -o pipefail
data=${1:?data folder}
out=${OUT:-/tmp/volume-out}
mkdir -p "$out" /work/shared
# The tests look for ../shared/data at the path they were built with.
[[ -e /work/shared/data ]] || ln -s "$data" /work/shared/data
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$out/log.txt"
echo "== [gpu] tests" | tee -a "$out/log.txt"
timeout 150 test_volume "[gpu]" -d yes 2>&1 | tee "$out/gpu_tests.txt" | grep -E "^[0-9.]+ s:|PSNR|passed|failed|FAILED|expansion|error" -A1 | grep -v "^--" | head -60 | tee -a "$out/log.txt"
echo "== memcheck" | tee -a "$out/log.txt"
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 test_volume "GPU partial frames*" 2>&1 | tail -4 | tee -a "$out/log.txt"
echo "== bench" | tee -a "$out/log.txt"
timeout 240 fresnel_bench_volume --data "$data" --frames 5 ${BENCH_ARGS:-} 2>&1 | tee -a "$out/log.txt"
if [[ -n ${PROFILE:-} ]]; then
  echo "== ncu: scan-conversion kernels on the 35 M mesh" | tee -a "$out/log.txt"
  timeout 120 ncu --kernel-name regex:"Count|Record|Sort|Composite" --launch-skip 12 --launch-count 10 \
    --section SpeedOfLight fresnel_bench_volume --data "$data" --meshes 35m --frames 1 2>&1 |
    grep -E "Kernel|void|Duration|Throughput|SM Busy" | head -80 | tee -a "$out/log.txt"
fi
