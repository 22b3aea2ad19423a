#!/usr/bin/env bash
# Issue 10's transport measurements in one device call (session 7: the pipelined segments, the
# reused outputs, the ResampleStream read-ahead; a cut-down version of it gave the H200 rows of
# docs/BENCHMARKS.md, session 7). Usage, with the binaries on PATH (a gpu-bundle's
# .gpu/env.sh): test_shm test_server fresnel_bench_transport, and for the hologram rows fresneld,
# fresnel and tests/bench/e2e/hologram_fps.sh beside this script:
#
#   h200_transport.sh OUT_DIR [BUNNY_PLY]
#
# Every step has its own timeout; the whole sweep is ~3-5 minutes on the H200 machine (the 1 GiB
# rows dominate). Everything goes to OUT_DIR/transport.log (and hologram_fps's files under
# OUT_DIR/cgh when BUNNY_PLY is given).
set -uo pipefail
out=$1
ply=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
log=$out/transport.log
step() {  # step SECONDS TITLE COMMAND...
  local t=$1 title=$2
  shift 2
  echo "=== $title: $*" | tee -a "$log"
  local start=$SECONDS
  timeout "$t" "$@" >>"$log" 2>&1
  echo "=== rc $? in $((SECONDS - start)) s" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$log" 2>&1
step 90 "tests: shm [gpu] cases" test_shm "[gpu]"
step 60 "tests: chunked transfer, segments" test_shm "[transfer]"
step 60 "tests: ResampleStream read-ahead" test_server "ResampleStream*"
b=fresnel_bench_transport
step 150 "sweep: pipelined segments (defaults), fresh and reused y" \
  $b --sizes 16,64,256,1024 --paths chunked,reuse --reps 3 --gpus all
step 90 "before: one call (--segments 1)" $b --sizes 64,1024 --paths chunked,reuse --segments 1 --reps 3 --gpus all
step 90 "8 connections at 1 GiB" $b --sizes 1024 --paths chunked,reuse --streams 8 --reps 3 --gpus all
step 60 "16 MiB over 4 streams (--parallel-min-mib 16)" $b --sizes 16 --paths chunked,reuse --parallel-min-mib 16 --reps 5 --gpus all
step 120 "issue case (256 MiB in, 1 GiB out)" $b --issue-case --paths chunked,reuse,shm --reps 3 --gpus all
step 90 "ResampleStream with read-ahead" $b --sizes 64,256 --paths stream --reps 3 --gpus all
if [[ -n $ply ]]; then
  step 120 "hologram Stream fps (one client, two clients)" bash "$here/../e2e/hologram_fps.sh" "$ply" "$out/cgh" 0 100
fi
echo "=== done" | tee -a "$log"
