#!/usr/bin/env bash
# Holographic video frames per second through HologramService.Stream, one client and two at once,
# against one fresneld: the issue-10 target (1e5-point bunny, 2048², tensor int8, 8-bit phase back
# per frame: ≥ 200 fps on one H200; two clients together more than one). Usage:
#   hologram_fps.sh BUNNY_PLY OUT_DIR [GPUS [FRAMES]]   (fresneld and fresnel on PATH; GPUS as
#   fresneld --gpus, default 0 = one GPU; FRAMES per client, default 100; HOLOGRAM_FPS_STREAMS =
#   fresneld --streams-per-gpu, default fresneld's own (4 since session 9); HOLOGRAM_FPS_PORT,
#   default 50781; FRESNELD = the server binary, default fresneld)
# Prints "one client: F frames/s" (the CLI's own line), then each client's line and the aggregate
# of the two concurrent streams (all frames / wall time from both starts to both ends), and the
# CPU seconds (user + system) the clients and fresneld spent in each part. fresneld inherits the
# environment: FRESNEL_STREAM_TRACE=1 adds each Stream's own line of where its time went
# (server/rpc/ordered_stream.h), printed here from fresneld's log.
set -euo pipefail
ply=$1
out=$2
gpus=${3:-0}
frames=${4:-100}
mkdir -p "$out"
port=${HOLOGRAM_FPS_PORT:-50781}
streams=()
[[ -n ${HOLOGRAM_FPS_STREAMS:-} ]] && streams=(--streams-per-gpu "$HOLOGRAM_FPS_STREAMS")
${FRESNELD:-fresneld} --listen 127.0.0.1:$port --metrics off --max-message-bytes $((256 << 20)) \
  --gpus "$gpus" "${streams[@]}" 2>"$out/fresneld.log" &
pid=$!
# fresneld's user + system CPU seconds so far (/proc/PID/stat fields 14 and 15, in clock ticks).
server_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$pid/stat"; }
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do grep -q "listening on port" "$out/fresneld.log" && break; sleep 0.1; done
f="fresnel --server 127.0.0.1:$port --timeout 600"
b="hologram --points $ply --fit 0.0159,0.0039,0.0108 --center 0,0,0.2 --pitch 4e-6 \
--wavelength 532e-9 --count 100000 --size 2048x2048 --algorithm tensor --spin 3.6"
# Warm-up: cuBLASLt autotuning, pool growth, staging buffers on both worker streams.
$f $b --frames 6 --phase-png "$out/warm.png" > /dev/null
TIMEFORMAT="client CPU: %U s user, %S s system, %R s wall"
echo "-- one client"
s0=$(server_cpu)
time $f $b --frames "$frames" --phase-png "$out/one.png" | tee "$out/one.txt" | grep -E "frames/s|server"
echo "fresneld CPU: $(python3 -c "print('%.2f' % ($(server_cpu) - $s0))") s"
echo "-- two clients at once"
s0=$(server_cpu)
start=$(date +%s.%N)
( time $f $b --frames "$frames" --phase-png "$out/c1.png" > "$out/c1.txt" ) 2> "$out/c1.time" &
q1=$!
( time $f $b --frames "$frames" --phase-png "$out/c2.png" > "$out/c2.txt" ) 2> "$out/c2.time" &
q2=$!
wait $q1 $q2
end=$(date +%s.%N)
grep -hE "frames/s|server" "$out/c1.txt" "$out/c2.txt"
cat "$out/c1.time" "$out/c2.time"
python3 -c "print('aggregate %.1f frames/s' % (2 * $frames / ($end - $start)))"
echo "fresneld CPU: $(python3 -c "print('%.2f' % ($(server_cpu) - $s0))") s"
kill -TERM $pid
wait $pid || true
trap - EXIT
grep "stream trace" "$out/fresneld.log" || true
