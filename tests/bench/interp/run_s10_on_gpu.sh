#!/usr/bin/env bash
# Session 10's interp call on the lent H200 (branch interp160): 160/147 on 2^26 float32, the
# split tail (pg_tail 2/3) and bulk input copies (pg_bulk_in 2) against the default and main.
# Bundle from the worktree, with main's bench binary beside this branch's:
#   cp /work/main/build/tests/bench/interp/fresnel_bench_interp build/fresnel_bench_interp_main
#   cd /work/main && bash scripts/gpu/bundle.sh interp160 /work/wt/interp160/build/tests/kernels/interp/test_interp \
#     /work/wt/interp160/build/tests/bench/interp/fresnel_bench_interp /work/wt/interp160/build/fresnel_bench_interp_main
# copy this script to /work/main/.gpu-interp160/run.sh, then run (carry .gpu-interp160)
#   cd .gpu-interp160 && tar -xJf b.tar.xz && source .gpu/env.sh && bash run.sh 2>&1 | tee $OUT/log
# MODE a: 1. the new [gpu] case (split tail, bulk input; bit-equal to the default and within the
#   oracle's tolerance) and the short-window variants case; 2. case (b) of this branch (default,
#   stages 1/3/2, the seven new variants, the 7128-tile probe) and main's binary, alternated four
#   times (call 1, 16:28 UTC, ran on an H100). MODE b (call 2): the new [gpu] case and the A/B
#   three times (one more row: stage 3 + tail 3 + bulk input).
set -u
mode=${1:-a}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /work/wt
[ -e /work/wt/interp160 ] || ln -s "$root" /work/wt/interp160
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
timed "$out/test_gpu.txt" 60 test_interp \
  "kPhaseGroups split tail and bulk input copies agree with the CPU oracle"
if [ "$mode" = a ]; then
  timed "$out/test_gpu.txt" 40 test_interp \
    "kPhaseGroups variants agree with the CPU oracle on short windows"
fi
reps=4
[ "$mode" = b ] && reps=3
for i in $(seq $reps); do
  timed "$out/ab.txt" 40 fresnel_bench_interp --no-e2e --only "b: resample_poly"
  timed "$out/ab.txt" 20 fresnel_bench_interp_main --no-e2e --only "b: resample_poly"
done
grep -h "D2D\|phase_groups\|^==\|^rc=" "$out/ab.txt"
tail -n 4 "$out/test_gpu.txt" 2>/dev/null
grep -h "FAILED\|failed" "$out/test_gpu.txt" | head -20
