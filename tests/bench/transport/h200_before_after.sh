#!/usr/bin/env bash
# Issue 10's proof in one device call: the transport table (1 MiB, 64 MiB, 1 GiB; unary,
# streamed, shm, chunked; the echo ceiling; memcpy) and issue 10's case, "before" and "after",
# measured by the same machine minutes apart.
#
#   h200_before_after.sh OUT_DIR BEFORE_DIR
#
# BEFORE_DIR holds fresneld, fresnel and fresnel_bench_transport built from 87c2f06 (the commit
# that added the bench, before any transport work: the numbers issue 10 was filed with). The
# "after" binaries are the ones on PATH (a gpu-bundle's .gpu/env.sh). Both benches start their own
# echo server and an in-process fresneld on the GPU pool; issue 10's case "before" runs the old
# fresneld and `fresnel bench` as tests/bench/e2e/interp_e2e.sh did when the issue was filed.
# ~3.5 minutes on the H200 machine; every step has its own timeout; the log is OUT_DIR/before_after.log.
set -uo pipefail
out=$1
before=$2
mkdir -p "$out"
log=$out/before_after.log
source "$(dirname "$0")/../device_step.sh"   # step(), the GPU line in $log
nproc >>"$log"
# The lent VM's memory grows as it is first touched (~0.4 s/GiB): touch 16 GiB once so that fresh
# buffers measure the host, not the VM (docs/transport.md, session 9).
step 30 "memory warm-up (16 GiB touched and freed)" python3 -c "
import numpy as np, time; t = time.time(); a = np.ones(16 << 27); print('16 GiB in %.2f s' % (time.time() - t))"
sizes=${SIZES:-1,64,1024}
reps=${REPS:-3}
step 150 "BEFORE: table (87c2f06: unary, stream)" \
  "$before/fresnel_bench_transport" --sizes "$sizes" --reps "$reps" --gpus all
# One process per path: the 1 GiB unary rows pass ~8-10 fresh 1 GiB buffers through gRPC, and the
# chunked row measured right after them in the same process came out at 2.69 GB/s, the issue
# case's chunked call in a fresh process at 5.72 (session 10, docs/BENCHMARKS.md).
for path in unary stream chunked shm; do
  step 90 "AFTER: table, $path" \
    fresnel_bench_transport --sizes "$sizes" --paths $path --reps "$reps" --gpus all
done
step 60 "AFTER: issue case (256 MiB in, 1 GiB out)" \
  fresnel_bench_transport --issue-case --paths unary,chunked,shm --reps "$reps" --gpus all
# Issue 10's case before: the old fresneld and `fresnel bench`, as interp_e2e.sh ran them.
port=50779
"$before/fresneld" --listen 127.0.0.1:$port --metrics off --max-message-bytes $((2000 << 20)) \
  --streams-per-gpu 2 --queue-length 64 2>"$out/fresneld_before.log" &
pid=$!
for _ in $(seq 300); do grep -q "listening on port" "$out/fresneld_before.log" && break; sleep 0.1; done
step 90 "BEFORE: issue case through fresneld (87c2f06), one unary call at a time" \
  "$before/fresnel" --server 127.0.0.1:$port --timeout 600 bench --op upfirdn --samples $((1 << 26)) \
  --up 4 --down 1 --taps 64 --device gpu --count "$reps" --warmup 1
kill -TERM $pid 2>/dev/null
wait $pid
echo "=== done" | tee -a "$log"
