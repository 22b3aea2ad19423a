#!/usr/bin/env bash
# Session 8's GPU call for issue 9's Blunt Fin target (docs/volume.md "Session 8"): one call, as
# the device budget allows (~260 s with a ~100 s cold start). Benches first (the numbers the
# target needs), then the [gpu] tests, the ncu profile of the walk kernel and memcheck.
#   fresnel_bench_volume_base   main before session 8 (session 7's walk, read-back mid-frame)
#   fresnel_bench_volume        this branch
#   fresnel_bench_volume_V      variants (tests/bench/volume/build_walk_variants.sh)
# Expects a gpu-bundle (scripts/gpu/bundle.sh volume --data ../shared/data/volume ...) unpacked
# and `source .gpu/env.sh` done, run from the folder holding .gpu; writes $OUT. Environment:
# FRAMES (10), MESHES (fin,6m,35m), VARIANTS / TEST_VARIANTS (suffixes of bundled
# fresnel_bench_volume_V / test_volume_V), NCU_BINS (benches to profile), NCU=0, MEMCHECK=0,
# MEMCHECK_BIN, MEMCHECK_CASES. Session 8's second call (41 s on the machine):
#   FRAMES=20 VARIANTS="c0 c1 c2 c3 c4 h1 h3" TEST_VARIANTS="c1 c2 c3 c4" \
#   NCU_BINS="fresnel_bench_volume fresnel_bench_volume_c3" MEMCHECK_BIN=test_volume_c3 bash run.sh
set -o pipefail
out=${OUT:-/tmp/volume-out}
mkdir -p "$out" /work/shared
ln -sfn "$PWD/.gpu/data" /work/shared/data   # the tests' FRESNEL_DATA_DIR
data="$PWD/.gpu/data"
log=$out/log.txt
SECONDS=0
step() { echo "== [$SECONDS s] $*" | tee -a "$log"; }
have() { command -v "$1" > /dev/null; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
B="--data $data --frames ${FRAMES:-10} --quick --scans walk"
step "bench, this branch: Blunt Fin, 6 M, 35 M"
timeout 80 fresnel_bench_volume $B --meshes ${MESHES:-fin,6m,35m} 2>&1 | tee -a "$log"
if have fresnel_bench_volume_base; then
  step "bench, main before session 8 (same machine)"
  timeout 30 fresnel_bench_volume_base $B --meshes fin,6m 2>&1 | tee -a "$log"
fi
for v in ${VARIANTS:-}; do
  if have fresnel_bench_volume_$v; then
    step "bench, variant $v: Blunt Fin"
    timeout 15 fresnel_bench_volume_$v $B --meshes fin 2>&1 | grep -E "^fin|fallbacks" | tee -a "$log"
  fi
done
step "bench, this branch again: Blunt Fin (drift check)"
timeout 20 fresnel_bench_volume $B --meshes fin 2>&1 | grep -E "^fin" | tee -a "$log"
step "test_volume [gpu]"
timeout 60 test_volume "[gpu]" > "$out/tests.txt" 2>&1; echo "rc=$?" | tee -a "$log"
grep -E "PSNR|passed|failed|FAILED|test cases" "$out/tests.txt" | head -30 | tee -a "$log"
for v in ${TEST_VARIANTS:-}; do
  if have test_volume_$v; then
    step "test_volume_$v [gpu]"
    timeout 60 test_volume_$v "[gpu]" > "$out/tests_v.txt" 2>&1; echo "rc=$?" | tee -a "$log"
    grep -E "Blunt Fin GPU ray walk|passed|failed|FAILED|test cases" "$out/tests_v.txt" | head -8 | tee -a "$log"
  fi
done
step "test_volume_service [gpu]"
timeout 30 test_volume_service "[gpu]" >> "$out/tests.txt" 2>&1; echo "rc=$?" | tee -a "$log"
tail -3 "$out/tests.txt" | tee -a "$log"
if [[ ${NCU:-1} -gt 0 ]] && have ncu; then
  first=1
  for bin in ${NCU_BINS:-fresnel_bench_volume}; do
    # --frames 1: a warm-up and one frame of Render, so the second WalkKernel launch is profiled.
    step "ncu WalkKernel of $bin, Blunt Fin 1024²"
    timeout 50 ncu --clock-control none --kernel-name regex:WalkKernel --launch-skip 1 --launch-count 1 \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
      --section SchedulerStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section InstructionStats --section SourceCounters -o "$out/walk" \
      $bin --data "$data" --frames 1 --quick --meshes fin --scans walk >> "$out/ncu_run.txt" 2>&1
    echo "rc=$?" | tee -a "$log"
    if [[ -f $out/walk.ncu-rep ]]; then
      echo "######## $bin" >> "$out/ncu.txt"
      ncu --import "$out/walk.ncu-rep" --page details >> "$out/ncu.txt" 2>&1
      [[ $first == 1 ]] && ncu --import "$out/walk.ncu-rep" --page source --csv --print-source sass > "$out/ncu_src.csv" 2>&1
      first=0
      ncu --import "$out/walk.ncu-rep" --page details 2>&1 | grep -E "Duration|Elapsed Cycles|SM Active Cycles|Registers Per|Achieved Active|Issued Warp|Executed Ipc|Local Memory Spilling Requests  " | tee -a "$log"
      rm -f "$out/walk.ncu-rep"
    else
      tail -20 "$out/ncu_run.txt" | tee -a "$log"
    fi
  done
fi
if [[ ${MEMCHECK:-1} -gt 0 ]]; then
  step "memcheck: the walk's tests (${MEMCHECK_BIN:-test_volume})"
  for f in ${MEMCHECK_CASES:-"GPU ray walk*"}; do
    timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 ${MEMCHECK_BIN:-test_volume} "$f" > "$out/memcheck.txt" 2>&1
    echo "$f rc=$?" | tee -a "$log"
    tail -2 "$out/memcheck.txt" | tee -a "$log"
  done
fi
step "done"
