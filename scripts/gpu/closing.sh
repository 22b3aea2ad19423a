#!/usr/bin/env bash
# Session 13's GPU calls. Call 1 (no argument): issue 15's speed table complete in one run (160/147 three times, the
# whole kernel table, cupyx beside it) and then every [gpu] test case of main, each binary in its
# own process (team_a.sh without soak, fuzzers, sanitizers). ~6 min; give the call 600 s.
# Here:   FRESNEL_GPU_FUZZ=0 bash scripts/gpu/team_bundle.sh
# Device: run carry [".gpu-team"]
#   cd .gpu-team && tar -xJf b.tar.xz && tar -xJf s12.tar.xz && source .gpu/env.sh &&
#   bash ../scripts/gpu/closing.sh
# (s12.tar.xz: session 12's stripped fresneld and fresnel, built from 96ae8c8 in /work/wt/s12, for
# the unwrap row's before/after; the row is skipped without it.)
# The run tool lends an H100 for `nvidia-h200` unless the work cannot fit 78 GiB, and says to
# rerun the baseline on the card given: every speed figure here is a ratio to the same run's
# copy bandwidth, FMA peak or cupyx, so it stands on whichever card ran it (the GPU line says).
set -uo pipefail
here=$PWD   # .gpu-team, with .gpu/env.sh sourced
root=$(cd .. && pwd)
out=${OUT:-$here/out}
mkdir -p "$out" /work /work/shared
[[ -e /work/main ]] || ln -s "$root" /work/main
[[ -e /work/shared/data ]] || ln -s "$here/.gpu/data" /work/shared/data
if [[ ${1:-} == 2 ]]; then
  # Call 2 (after call 1 on an H200): the new unwrap [gpu] case (its block was too small in call
  # 1), test_inline_staging's [gpu] case that failed in call 1 with main's and with session 12's
  # binary (s12/, from s12.tar.xz), issue 15 with stage 3 + bulk input as the default (every
  # [gpu] case of test_interp, 160/147 three times, the whole table), then issue 10's transport
  # table before/after (before/, from before.tar.xz; tests/bench/transport/h200_before_after.sh).
  # CLOSING_QUICK=1: neither test_interp nor the transport table (a short call).
  log=$out/call2.log
  source "$root/tests/bench/device_step.sh"
  cd "$root"
  step 90 "unwrap into the caller's memory" test_unwrap \
    "GPU results go straight into the caller's memory, pageable or pinned"
  step 200 "inline staging [gpu], main" test_inline_staging "[gpu]"
  [[ -x $here/s12/test_inline_staging ]] &&
    step 200 "inline staging [gpu], session 12's binary" "$here/s12/test_inline_staging" "[gpu]"
  grep -h "===\|FAILED\|differ\|passed\|failed" "$log" | head -40
  for i in 1 2 3; do
    step 60 "issue 15: 160/147 on 2^26, repetition $i" \
      fresnel_bench_interp --no-e2e --only "b: resample_poly"
  done
  grep -h "===\|2\^26  \|stage1   \|passed\|failed" "$log" | tail -30
  # Only on an H200 (issue 10's table was set there; an H100's is in BENCHMARKS.md, session 12).
  if [[ ${CLOSING_QUICK:-0} != 1 && -x $here/before/fresneld ]] && nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    bash "$root/tests/bench/transport/h200_before_after.sh" "$out" "$here/before"
  fi
  grep -h "=== \|GB/s\|ratio" "$out/before_after.log" 2>/dev/null | head -60
  [[ ${CLOSING_QUICK:-0} == 1 ]] ||
    step 150 "issue 15: test_interp [gpu] with the new default" test_interp "[gpu]"
  cd "$out" && tar -czf logs2.tgz ./*.log 2>/dev/null
  exit 0
fi
log=$out/interp.log
source "$root/tests/bench/device_step.sh"   # step(), the GPU line in $log
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv >>"$log" 2>&1
for i in 1 2 3; do
  step 60 "issue 15: 160/147 on 2^26, repetition $i" \
    fresnel_bench_interp --no-e2e --only "b: resample_poly"
done
step 90 "issue 15: the whole kernel table" fresnel_bench_interp --no-e2e
step 90 "issue 15: cupyx on the same cases" python3 "$root/tests/bench/interp/bench_cupy.py"
grep -h "===\|160/147\|copy\|FMA" "$log" | head -60
# issue 14's unwrap row (session 13: the phase read in place from the region, the result written
# straight into it, the client leaving it there) against session 12's fresneld and fresnel
# (s12/, unpacked from s12.tar.xz), one GPU split in two partitions as in session 12's rehearsal.
if [[ -x $here/s12/fresneld ]]; then
  port=50881
  for build in s12 main; do
    bin=""
    [[ $build == s12 ]] && bin=$here/s12/
    "${bin}fresneld" --listen 127.0.0.1:$port --metrics off --gpus 0 --gpu-partitions 2 \
      --shm-bytes 17179869184 >"$out/fresneld_unwrap_$build.log" 2>&1 &
    spid=$!
    for _ in $(seq 1 100); do "${bin}fresnel" --server 127.0.0.1:$port health >/dev/null 2>&1 && break; sleep 0.2; done
    for c in 1 8; do
      step 60 "issue 14: unwrap 4096^2 --shm -c $c, $build" "${bin}fresnel" --server 127.0.0.1:$port \
        bench --op unwrap --image-size 4096x4096 --shm -c $c -d 6 --device gpu
    done
    kill -TERM $spid; wait $spid
    port=$((port + 1))
  done
  grep -h "===\|latency\|server (ms)\|rpc (ms)\|throughput\|devices" "$log" | tail -40
fi
# every [gpu] case; team_a.sh's own limit keeps the call inside 600 s
OUT=$out TEAM_SOAK=0 TEAM_FUZZ=" " TEAM_SAN=0 TEAM_RACE_LONG_S=1 \
  TEAM_A_LIMIT=$((560 - SECONDS)) bash "$root/scripts/gpu/team_a.sh"
pkill -f compute-sanitizer 2>/dev/null
cd "$out" && tar -czf logs.tgz ./*.log 2>/dev/null
