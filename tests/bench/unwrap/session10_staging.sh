#!/usr/bin/env bash
# Session 10's device call (issue 10 item 3: pinned staging for ResampleStream chunks and unwrap):
# the [gpu] tests of the change, then before/after in one call. Usage, with the binaries on PATH
# (a gpu-bundle's .gpu/env.sh) and main's two bench binaries as fresnel_bench_unwrap_main and
# fresnel_bench_transport_main:
#
#   session10_staging.sh OUT_DIR
#
# Under 3 minutes on one H100/H200 (every step's limit together). Every step has its own timeout; everything goes to OUT_DIR/log.
set -uo pipefail
out=$1
mkdir -p "$out"
log=$out/log
source "$(dirname "$0")/../device_step.sh"   # step(), the GPU line in $log
step 20 "PushInto == Push (CPU and GPU)" test_interp "[push_into]"
step 30 "unwrap through the staging chunks, GPU vs CPU" test_unwrap \
  "GPU Goldstein through the pinned staging chunks equals the CPU,staged host<->device copies move every byte,GPU Goldstein equals the CPU with masks*,GPU least squares agrees with the CPU,GPU weighted least squares agrees with the CPU"
# The lent machines are VMs whose memory grows as it is first used (~0.4 s/GiB).
step 10 "memory warm-up (4 GiB touched and freed)" python3 -c "
import numpy as np, time; t = time.time(); a = np.ones(4 << 27); print('4 GiB in %.2f s' % (time.time() - t))"
u="--sizes 8192 --densities 1e-4 --reps 3 --cpu-max 0"
step 25 "unwrap: main's binary" fresnel_bench_unwrap_main $u
step 25 "unwrap: this branch (pinned staging)" fresnel_bench_unwrap $u
step 40 "ResampleStream staged == pageable on a GPU server" test_server \
  "GPU server: ResampleStream through pinned staging*"
t="--sizes 64 --paths stream --reps 3 --gpus all"
step 20 "ResampleStream: main's binary" fresnel_bench_transport_main $t
step 20 "ResampleStream: this branch" fresnel_bench_transport $t
echo "=== done" | tee -a "$log"
