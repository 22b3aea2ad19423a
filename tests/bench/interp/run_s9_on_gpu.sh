#!/usr/bin/env bash
# Session 9's interp call on the lent H200: one sweep (the machine is released 30 s after a call).
# Bundle from the worktree, with main's bench binary beside this branch's:
#   cp /work/main/build/tests/bench/interp/fresnel_bench_interp build/fresnel_bench_interp_main
#   FRESNEL_GPU_BUNDLE=/work/shared/tools/gpu-bundle bash scripts/gpu/bundle.sh interp \
#     build/tests/kernels/interp/test_interp build/tests/bench/interp/fresnel_bench_interp \
#     build/fresnel_bench_interp_main
# copy .gpu-interp/ and this script (as run.sh) to /work/main/.gpu-interp/, then run
#   cd .gpu-interp && tar -xJf b.tar.xz && source .gpu/env.sh && bash run.sh
# MODE a (call 1, 15:08 UTC): 1. case (b) of this branch (then: staging in rounds as the default,
#   with the whole-tile staging and R = 1 rows of the same binary) against main's binary,
#   alternated three times, then case (c); 2. every [gpu] case; 3. the whole bench table once;
#   4. cupyx on the same cases; 5. racecheck of the short-window case, as far as 25 s allow.
# MODE b (call 2): 1. case (b) as in a (the default now the bulk copy-out, with the thread
#   copy-out and the rounds rows of the same binary); 2. this branch's case (c); 3. every [gpu]
#   case; MODE bt: then the whole bench table too (when the device budget allows).
# Logs: ab.txt, c.txt, test_gpu.txt, bench.txt, cupy.txt, racecheck.txt, gpu.txt (at most 8 files
# come back).
set -u
mode=${1:-a}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /work/wt
# test_interp finds the SciPy goldens through FRESNEL_SOURCE_DIR (baked in: /work/wt/interp).
[ -e /work/wt/interp ] || ln -s "$root" /work/wt/interp
cd "$root"
timed() {  # timed LOG SECONDS CMD...: appends CMD's output, its status and wall time to LOG
  local log=$1 limit=$2 t0
  shift 2
  t0=$(date +%s)
  echo "== $* ($(date -u +%T))" >>"$log"
  timeout "$limit" "$@" >>"$log" 2>&1
  echo "rc=$? wall=$(($(date +%s) - t0))s" >>"$log"
}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt" 2>&1
for i in 1 2 3; do
  timed "$out/ab.txt" 25 fresnel_bench_interp --no-e2e --only "b: resample_poly"
  timed "$out/ab.txt" 20 fresnel_bench_interp_main --no-e2e --only "b: resample_poly"
done
if [ "$mode" = a ]; then
  timed "$out/c.txt" 20 fresnel_bench_interp --no-e2e --only "c: 64ch resample"
  timed "$out/c.txt" 20 fresnel_bench_interp_main --no-e2e --only "c: 64ch resample"
  timed "$out/test_gpu.txt" 100 test_interp "[gpu]"
  timed "$out/bench.txt" 70 fresnel_bench_interp --no-e2e
else  # this branch's case (c), the tests, then (mode bt) the table
  timed "$out/c.txt" 20 fresnel_bench_interp --no-e2e --only "c: 64ch resample"
  timed "$out/test_gpu.txt" 100 test_interp "[gpu]"
  [ "$mode" = bt ] && timed "$out/bench.txt" 70 fresnel_bench_interp --no-e2e
fi
if [ "$mode" = a ]; then
  timed "$out/cupy.txt" 40 python3 tests/bench/interp/bench_cupy.py
  timed "$out/racecheck.txt" 25 compute-sanitizer --tool racecheck test_interp \
    "kPhaseGroups variants agree with the CPU oracle on short windows"
fi
grep -h "phase_groups\|^==\|^rc=" "$out/ab.txt" "$out/c.txt" 2>/dev/null
grep -h "^b: \|^c: " "$out/bench.txt" 2>/dev/null
tail -n 4 "$out/test_gpu.txt" "$out/racecheck.txt" 2>/dev/null
