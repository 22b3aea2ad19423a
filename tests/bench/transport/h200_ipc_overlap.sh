#!/usr/bin/env bash
# Session 9's device call (docs/BENCHMARKS.md, "Session 9: CUDA IPC and overlap"): the [gpu] tests
# of the window primitive, the overlapped pipeline and CUDA IPC regions, then issue 10's case
# (upfirdn float32 2^26, up 4, 64 taps) through fresneld without and with the copy/compute
# overlap (--overlap-chunk-bytes 0, then the default 32 MiB): x and y inline, in a POSIX shm
# region and in a CUDA IPC region of another process (tests/server/cuda_ipc_peer.cc bench).
# Binaries on PATH (a gpu-bundle's .gpu/env.sh): test_interp test_cuda_ipc cuda_ipc_peer
# test_shm test_inline_staging fresneld.
#
#   h200_ipc_overlap.sh OUT_DIR [LOG2N] [REPS]
set -uo pipefail
out=$1
log2n=${2:-26}
reps=${3:-7}
mkdir -p "$out"
log=$out/ipc_overlap.log
export FRESNEL_CUDA_IPC_PEER=${FRESNEL_CUDA_IPC_PEER:-$(command -v cuda_ipc_peer)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$log" 2>&1
t() {  # t SECONDS TITLE COMMAND...
  local s=$1 title=$2
  shift 2
  echo "=== $title: $*" >>"$log"
  local start=$SECONDS
  timeout "$s" "$@" >>"$log" 2>&1
  echo "=== rc $? in $((SECONDS - start)) s" >>"$log"
}
t 120 "window primitive + overlapped pipeline [gpu]" test_interp "[window]"
t 60 "UpfirdnInto [gpu]" test_interp "[into]"
t 90 "CUDA IPC regions (CPU cases and the two-process [gpu] case)" test_cuda_ipc "*"
timeout 120 test_shm "[gpu]" >"$out/test_shm.log" 2>&1 &
p1=$!
timeout 120 test_inline_staging "[gpu]" >"$out/test_inline_staging.log" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
tail -n 3 "$out/test_shm.log" "$out/test_inline_staging.log" >>"$log"
echo "=== rc test_shm [gpu] $r1, test_inline_staging [gpu] $r2" >>"$log"
port=50917
for overlap in 0 33554432; do
  echo "=== bench: fresneld --overlap-chunk-bytes $overlap" >>"$log"
  fresneld --listen 127.0.0.1:$port --metrics off --gpus all --overlap-chunk-bytes $overlap \
    --max-message-bytes 1610612736 >"$out/fresneld_$overlap.log" 2>&1 &
  server=$!
  PEER_INLINE=1 timeout 150 cuda_ipc_peer bench 127.0.0.1:$port "$log2n" "$reps" >>"$log" 2>&1
  echo "=== rc $?" >>"$log"
  kill "$server"
  wait "$server" 2>/dev/null
  port=$((port + 1))
done
echo "=== done" >>"$log"
