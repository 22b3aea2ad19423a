#!/usr/bin/env bash
# The second GPU session behind docs/volume.md "Ray walk": [gpu] tests of the default build
# (kAuto = walk, back faces culled from the tile lists), memcheck of the walk and of the cell
# projection's partial frames, the bench (walk vs one-pass cell projection) and an ncu summary of the walk
# kernel on Blunt Fin. Expects a gpu-bundle of test_volume and fresnel_bench_volume with --data
# .../volume, unpacked and `source .gpu/env.sh` done; writes $OUT.
set -o pipefail
out=${OUT:-/tmp/volume-out}
mkdir -p "$out" /work/shared
ln -sfn "$PWD/.gpu/data" /work/shared/data
log=$out/log.txt
data="$PWD/.gpu/data"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$log"
echo "== test_volume [gpu]" | tee -a "$log"
SECONDS=0
timeout 45 test_volume "[gpu]" -d yes > "$out/test_volume.txt" 2>&1; echo "rc=$? wall ${SECONDS} s" | tee -a "$log"
grep -E "^[0-9.]+ s:|PSNR|kAuto|passed|failed|FAILED|with expansion|error" -A1 "$out/test_volume.txt" |
  grep -v "^--" | head -80 | tee -a "$log"
echo "== memcheck" | tee -a "$log"
for f in "GPU ray walk*" "GPU partial frames*"; do
  timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 test_volume "$f" > "$out/memcheck.txt" 2>&1; echo "$f rc=$?" | tee -a "$log"
  tail -2 "$out/memcheck.txt" | tee -a "$log"
done
echo "== bench" | tee -a "$log"
timeout 60 fresnel_bench_volume --data "$data" --frames 5 --quick --meshes fin,6m,35m --scans walk,one 2>&1 | tee -a "$log"
# (The run behind docs/volume.md also timed 8, 4 and 2 thread rows per block through an
# environment variable since removed: no difference.)
echo "== ncu (walk kernel, Blunt Fin, 1024²)" | tee -a "$log"
timeout 60 ncu --kernel-name regex:WalkKernel --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis fresnel_bench_volume --data "$data" --frames 3 --quick --meshes fin --scans walk > "$out/ncu.txt" 2>&1; echo "rc=$?" | tee -a "$log"
grep -E "Duration|Throughput|Occupancy|Registers|Warp Cycles|Eligible|Issued|L1/TEX Hit|L2 Hit|Active Warps|Block Limit|Stall|Local" "$out/ncu.txt" | head -40 | tee -a "$log"
