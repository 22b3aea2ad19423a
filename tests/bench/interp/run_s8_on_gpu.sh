#!/usr/bin/env bash
# Session 8's interp sweep on the lent H200, in one call (the machine is released 30 s after a
# call, so every call pays the cold start): the [gpu] tests, the bench table without end-to-end
# rows, and memcheck of the short-window case (every kPhaseGroups variant, prefetch included).
# Bundle (from the worktree): bash scripts/gpu/bundle.sh interp build/tests/kernels/interp/test_interp \
#   build/tests/bench/interp/fresnel_bench_interp; copy .gpu-interp/ with this script (run.sh)
# to /work/main/.gpu-interp/; call: cd .gpu-interp && tar -xJf b.tar.xz && source .gpu/env.sh &&
# bash run.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /work/wt
# test_interp finds the SciPy goldens through FRESNEL_SOURCE_DIR (baked in: /work/wt/interp).
[ -e /work/wt/interp ] || ln -s "$root" /work/wt/interp
cd "$root"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$out/gpu.txt" 2>&1
t0=$(date +%s)
timeout 65 fresnel_bench_interp --no-e2e >"$out/bench.txt" 2>&1
echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >>"$out/bench.txt"
t0=$(date +%s)
timeout 55 test_interp "[gpu]" >"$out/test_gpu.txt" 2>&1
echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >>"$out/test_gpu.txt"
t0=$(date +%s)
timeout 25 compute-sanitizer --tool memcheck test_interp \
  "kPhaseGroups variants agree with the CPU oracle on short windows" >"$out/memcheck.txt" 2>&1
echo "rc=$? wall=$(( $(date +%s) - t0 ))s" >>"$out/memcheck.txt"
tail -3 "$out"/*.txt
