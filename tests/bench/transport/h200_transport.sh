#!/usr/bin/env bash
# Issue 10's transport measurements in one device call (session 8: fresh outputs without the
# zero-fill, faulted in by the download threads (the default since session 9) or prefaulted
# during the upload, against reused ones and the 4-connection echo; the hologram Stream fps).
# Usage,
# with the binaries on PATH (a gpu-bundle's .gpu/env.sh): test_shm test_inline_staging
# fresnel_bench_transport, and for the hologram rows fresneld, fresnel and
# tests/bench/e2e/hologram_fps.sh (HOLOGRAM_FPS, default: beside this script):
#
#   h200_transport.sh OUT_DIR [BUNNY_PLY]
#
# ~1.5 minutes on the H200 machine (FULL=1 adds the hologram with 4 worker streams and session
# 7's rows: one call per transfer, 8 connections, 16 MiB over 4 streams, ResampleStream; ~2
# minutes more). Every step has its own
# timeout; everything goes to OUT_DIR/transport.log (hologram_fps's files under OUT_DIR/cgh*).
set -uo pipefail
out=$1
ply=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
fps=${HOLOGRAM_FPS:-$here/../e2e/hologram_fps.sh}
mkdir -p "$out"
log=$out/transport.log
source "$(dirname "$0")/../device_step.sh"   # step(), the GPU line in $log
# The two [gpu] test binaries at once (separate processes, separate servers): half the wall time.
echo "=== tests: test_shm [gpu] and test_inline_staging [gpu], in parallel" | tee -a "$log"
start=$SECONDS
timeout 90 test_shm "[gpu]" >"$out/test_shm.log" 2>&1 &
p1=$!
timeout 90 test_inline_staging "[gpu]" >"$out/test_inline_staging.log" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
tail -n 3 "$out/test_shm.log" "$out/test_inline_staging.log" >>"$log"
echo "=== rc test_shm $r1, test_inline_staging $r2 in $((SECONDS - start)) s" | tee -a "$log"
# The lent machines are VMs whose memory grows as it is first used (~0.4 s/GiB): touch 16 GiB once
# so that the fresh-y rows measure the host, not the VM's growth (docs/transport.md, session 9).
step 30 "memory warm-up (16 GiB touched and freed)" python3 -c "
import numpy as np, time; t = time.time(); a = np.ones(16 << 27); print('16 GiB in %.2f s' % (time.time() - t))"
b=fresnel_bench_transport
step 120 "sweep: pipelined segments (defaults), fresh and reused y, 4-connection echo" \
  $b --sizes 64,256,1024 --paths chunked,reuse --reps 3 --gpus all
step 60 "fresh y prefaulted during the upload (--y-touch prefault, the default before session 9)" \
  $b --sizes 64,1024 --paths chunked --y-touch prefault --reps 3 --gpus all
step 60 "issue case (256 MiB in, 1 GiB out)" $b --issue-case --paths chunked,reuse --reps 3 --gpus all
if [[ -n $ply ]]; then
  step 60 "hologram Stream fps, fresneld's default worker streams (one client, two clients)" \
    bash "$fps" "$ply" "$out/cgh" 0 100
fi
if [[ ${FULL:-0} == 1 ]]; then
  [[ -n $ply ]] && step 60 "hologram Stream fps, 2 worker streams (the default before session 9)" \
    env HOLOGRAM_FPS_STREAMS=2 HOLOGRAM_FPS_PORT=50782 bash "$fps" "$ply" "$out/cgh2" 0 100
  step 90 "before: one call (--segments 1)" $b --sizes 64,1024 --paths chunked,reuse --segments 1 --reps 3 --gpus all
  step 90 "8 connections at 1 GiB" $b --sizes 1024 --paths chunked,reuse --streams 8 --reps 3 --gpus all
  step 60 "16 MiB over 4 streams (--parallel-min-mib 16)" $b --sizes 16 --paths chunked,reuse --parallel-min-mib 16 --reps 5 --gpus all
  step 90 "ResampleStream with read-ahead" $b --sizes 64,256 --paths stream --reps 3 --gpus all
fi
echo "=== done" | tee -a "$log"
