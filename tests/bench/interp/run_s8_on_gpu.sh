#!/usr/bin/env bash
# Session 8's interp calls on the lent H200 (the machine is released 30 s after a call, so each
# call is one sweep). Bundle from the worktree:
#   FRESNEL_GPU_BUNDLE=/work/shared/tools/gpu-bundle bash scripts/gpu/bundle.sh interp \
#     build/tests/kernels/interp/test_interp build/tests/bench/interp/fresnel_bench_interp \
#     [main's bench binary copied as fresnel_bench_interp_main]
# copy .gpu-interp/ and this script (as run.sh) to /work/main/.gpu-interp/, then run
#   cd .gpu-interp && tar -xJf b.tar.xz && source .gpu/env.sh && bash run.sh MODE
# MODE a (call 1): the bench table without end-to-end rows, every [gpu] case, memcheck of the
#   short-window case (every kPhaseGroups variant);
# MODE b (call 2): cases (b) and (c) of this branch against main's bench binary, alternated
#   twice, then the two [gpu] cases that run every kernel variant;
# MODE c (call 3): case (b)'s default row of this branch against main's, alternated three times.
set -u
mode=${1:-a}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /work/wt
# test_interp finds the SciPy goldens through FRESNEL_SOURCE_DIR (baked in: /work/wt/interp).
[ -e /work/wt/interp ] || ln -s "$root" /work/wt/interp
cd "$root"
timed() {  # timed LOG SECONDS CMD...: runs CMD into LOG, appends its status and wall time
  local log=$1 limit=$2 t0
  shift 2
  t0=$(date +%s)
  timeout "$limit" "$@" >"$log" 2>&1
  echo "rc=$? wall=$(($(date +%s) - t0))s" >>"$log"
}
case $mode in
  a)
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt" 2>&1
    timed "$out/bench.txt" 65 fresnel_bench_interp --no-e2e
    timed "$out/test_gpu.txt" 55 test_interp "[gpu]"
    timed "$out/memcheck.txt" 25 compute-sanitizer --tool memcheck test_interp \
      "kPhaseGroups variants agree with the CPU oracle on short windows"
    ;;
  b)
    for i in 1 2; do
      timed "$out/b_branch_$i.txt" 20 fresnel_bench_interp --no-e2e --only "b: "
      timed "$out/b_main_$i.txt" 20 fresnel_bench_interp_main --no-e2e --only "b: "
    done
    timed "$out/c_branch.txt" 20 fresnel_bench_interp --no-e2e --only "c: "
    timed "$out/c_main.txt" 20 fresnel_bench_interp_main --no-e2e --only "c: "
    timed "$out/test_short.txt" 20 test_interp \
      "kPhaseGroups variants agree with the CPU oracle on short windows"
    timed "$out/test_gpu.txt" 45 test_interp "every CUDA kernel agrees with the CPU oracle on windows"
    ;;
  c)
    for i in 1 2 3; do
      timed "$out/b_branch_$i.txt" 15 fresnel_bench_interp --no-e2e --only "b: resample_poly"
      timed "$out/b_main_$i.txt" 15 fresnel_bench_interp_main --no-e2e --only "b: resample_poly"
    done
    ;;
esac
grep -h "phase_groups\|tensor" "$out"/b*.txt 2>/dev/null | head -60
tail -n 3 "$out"/*.txt
