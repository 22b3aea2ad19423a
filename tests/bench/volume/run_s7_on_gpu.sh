#!/usr/bin/env bash
# Session 7's GPU sweep for issue 9's Blunt Fin target (docs/volume.md "Session 7"), not run in
# session 7 (no device lent): [gpu] tests of the walk on cached cell geometry and of RenderInto,
# the service's [gpu] test, the bench (Blunt Fin and the 6 M / 35 M grids, walk only: Render into
# a new HostArray and RenderInto a reused pinned buffer), the session-6 bench binary on the same
# machine for an A/B if bundled (fresnel_bench_volume_base), the register variants if bundled
# (fresnel_bench_volume_b2 / _b4: FRESNEL_VOLUME_WALK_MIN_BLOCKS 2 / 4), an ncu profile of the
# walk kernel, memcheck of the walk and RenderInto tests, and compute-sanitizer racecheck of "the
# three scan conversions" (cut at 90 s in session 6; ~200 s asked).
# Expects a gpu-bundle (/work/prompts/bundle.sh) of test_volume, test_volume_service and
# fresnel_bench_volume (+ the optional ones) with --data .../volume, unpacked and
# `source .gpu/env.sh` done, run from the folder holding .gpu; writes $OUT. About 6 minutes with
# the racecheck, 2.5 without (RACECHECK_S=0).
set -o pipefail
out=${OUT:-/tmp/volume-out}
# The tests find Blunt Fin at FRESNEL_DATA_DIR = <checkout>/../shared/data of the build.
mkdir -p "$out" /work/shared /work/wt-volume /work/main
ln -sfn "$PWD/.gpu/data" /work/shared/data
data="$PWD/.gpu/data"
log=$out/log.txt
SECONDS=0
step() { echo "== [$SECONDS s] $*" | tee -a "$log"; }
have() { command -v "$1" > /dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
step "test_volume [gpu]"
timeout 90 test_volume "[gpu]" -d yes > "$out/tests.txt" 2>&1; echo "rc=$?" | tee -a "$log"
grep -E "PSNR|passed|failed|FAILED|test cases" "$out/tests.txt" | head -40 | tee -a "$log"
step "test_volume_service [gpu]"
timeout 60 test_volume_service "[gpu]" >> "$out/tests.txt" 2>&1; echo "rc=$?" | tee -a "$log"
tail -3 "$out/tests.txt" | tee -a "$log"
step "bench (walk; Blunt Fin, 6 M, 35 M)"
timeout 90 fresnel_bench_volume --data "$data" --frames 10 --quick --meshes fin,6m,35m --scans walk 2>&1 | tee -a "$log"
if have fresnel_bench_volume_base; then
  step "bench, session-6 walk (same machine)"
  timeout 40 fresnel_bench_volume_base --data "$data" --frames 10 --quick --meshes fin,6m --scans walk 2>&1 | tee -a "$log"
fi
for b in 2 4; do
  if have fresnel_bench_volume_b$b; then
    step "bench, $b blocks of registers per SM"
    timeout 30 fresnel_bench_volume_b$b --data "$data" --frames 10 --quick --meshes fin --scans walk 2>&1 | grep -E "^fin|walk fallbacks" | tee -a "$log"
  fi
done
# --frames 1: a warm-up and one frame, so two WalkKernel launches; the second is profiled.
step "ncu WalkKernel, Blunt Fin 1024²"
timeout 90 ncu --clock-control none --kernel-name regex:WalkKernel --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section InstructionStats --section SourceCounters -o "$out/walk" \
  fresnel_bench_volume --data "$data" --frames 1 --quick --meshes fin --scans walk > "$out/ncu_run.txt" 2>&1
echo "rc=$?" | tee -a "$log"
if [[ -f $out/walk.ncu-rep ]]; then
  ncu --import "$out/walk.ncu-rep" --page details > "$out/ncu.txt" 2>&1
  ncu --import "$out/walk.ncu-rep" --page source --csv --print-source sass > "$out/ncu_src.csv" 2>&1
  grep -E "Duration|Throughput|Occupancy|Registers|Warp Cycles Per|Eligible|Issued Warp|No Eligible|Active Warps|L1/TEX Hit|L2 Hit|Executed Ipc|Stall" "$out/ncu.txt" | head -50 | tee -a "$log"
else
  tail -20 "$out/ncu_run.txt" | tee -a "$log"
fi
step "memcheck: walk and RenderInto tests"
for f in "GPU ray walk*" "GPU RenderInto*"; do
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 test_volume "$f" > "$out/memcheck.txt" 2>&1
  echo "$f rc=$?" | tee -a "$log"
  tail -2 "$out/memcheck.txt" | tee -a "$log"
done
if [[ ${RACECHECK_S:-200} -gt 0 ]]; then
  step "racecheck: the three scan conversions (limit ${RACECHECK_S:-200} s)"
  timeout "${RACECHECK_S:-200}" compute-sanitizer --tool racecheck --error-exitcode 9 \
    test_volume "GPU: the three scan conversions give the same records" > "$out/racecheck.txt" 2>&1
  echo "rc=$? (124 = cut by the limit)" | tee -a "$log"
  tail -3 "$out/racecheck.txt" | tee -a "$log"
fi
step "done"
