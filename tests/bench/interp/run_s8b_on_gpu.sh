#!/usr/bin/env bash
# Session 8's second interp call: 160/147 (cases b and c) of this branch against main's bench
# binary (fresnel_bench_interp_main, the session-7 kernels) in the same call, alternated twice,
# with the streaming-store variant; then the two [gpu] cases that run every kernel variant
# (bit-equality of the new kPhaseGroups options, the tensor path's tolerance).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /work/wt
[ -e /work/wt/interp ] || ln -s "$root" /work/wt/interp
cd "$root"
for i in 1 2; do
  timeout 20 fresnel_bench_interp --no-e2e --only "b: " >"$out/b_branch_$i.txt" 2>&1
  timeout 20 fresnel_bench_interp_main --no-e2e --only "b: " >"$out/b_main_$i.txt" 2>&1
done
timeout 20 fresnel_bench_interp --no-e2e --only "c: " >"$out/c_branch.txt" 2>&1
timeout 20 fresnel_bench_interp_main --no-e2e --only "c: " >"$out/c_main.txt" 2>&1
t0=$(date +%s)
timeout 20 test_interp "kPhaseGroups variants agree with the CPU oracle on short windows" \
  >"$out/test_short.txt" 2>&1
echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >>"$out/test_short.txt"
t0=$(date +%s)
timeout ${WINDOW_S:-45} test_interp "every CUDA kernel agrees with the CPU oracle on windows" \
  >"$out/test_gpu.txt" 2>&1
echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >>"$out/test_gpu.txt"
grep -h "phase_groups" "$out"/b_*.txt | head -40
tail -n 3 "$out/test_short.txt" "$out/test_gpu.txt"
