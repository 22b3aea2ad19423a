#!/usr/bin/env bash
# The GPU session behind docs/volume.md "Scan conversion" (run 2): [gpu] tests, the bench with
# the three scan conversions, memcheck of the warp-list kernels. Expects a gpu-bundle of
# test_volume and fresnel_bench_volume with --data .../volume, unpacked and `source .gpu/env.sh`
# done (e.g. /work/prompts/bundle.sh), run from the folder holding .gpu; writes $OUT.
set -o pipefail
out=${OUT:-/tmp/volume-out}
mkdir -p "$out" /work/shared
ln -sfn "$PWD/.gpu/data" /work/shared/data
log=$out/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$log"
echo "== [gpu] tests" | tee -a "$log"
SECONDS=0
timeout 90 test_volume "[gpu]" -d yes > "$out/gpu_tests.txt" 2>&1; echo "rc=$?" | tee -a "$log"
grep -E "^[0-9.]+ s:|PSNR|passed|failed|FAILED|with expansion|error" -A1 "$out/gpu_tests.txt" | grep -v "^--" | head -120 | tee -a "$log"
echo "tests wall ${SECONDS} s" | tee -a "$log"
echo "== bench" | tee -a "$log"
SECONDS=0
timeout 90 fresnel_bench_volume --data "$PWD/.gpu/data" --frames 5 --quick --meshes fin,1m,6m,35m \
  --scans thread,list,one --pass-records 268435456,134217728 2>&1 | tee -a "$log"
echo "bench wall ${SECONDS} s" | tee -a "$log"
echo "== bench fin, all rows" | tee -a "$log"
timeout 30 fresnel_bench_volume --data "$PWD/.gpu/data" --frames 5 --meshes fin --scans list,one 2>&1 | tee -a "$log"
echo "== memcheck (scan conversions; partial frames)" | tee -a "$log"
SECONDS=0
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 test_volume "GPU: the three scan conversions*" > "$out/memcheck.txt" 2>&1; echo "rc=$? wall ${SECONDS} s" | tee -a "$log"
tail -3 "$out/memcheck.txt" | tee -a "$log"
timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 test_volume "GPU partial frames*" > "$out/memcheck2.txt" 2>&1; echo "rc=$?" | tee -a "$log"
tail -3 "$out/memcheck2.txt" | tee -a "$log"
