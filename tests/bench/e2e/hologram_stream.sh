#!/usr/bin/env bash
# End-to-end holographic video: starts fresneld (all GPUs), streams point-cloud frames through
# HologramService.Stream with `fresnel hologram --frames` over loopback and prints frames per
# second, per-frame latency and the server's per-frame time. Usage:
#   hologram_stream.sh BUNNY_PLY [OUT_DIR [GPUS]]   (fresneld and fresnel on PATH; GPUS as
#   fresneld --gpus, default all)
set -euo pipefail
ply=$1
out=${2:-.}
gpus=${3:-all}
mkdir -p "$out"
port=50778
fresneld --listen 127.0.0.1:$port --metrics off --max-message-bytes $((256 << 20)) \
  --gpus "$gpus" --streams-per-gpu 2 2>"$out/fresneld_stream.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do grep -q "listening on port" "$out/fresneld_stream.log" && break; sleep 0.1; done
f="fresnel --server 127.0.0.1:$port --timeout 600"
bunny="--points $ply --fit 0.0159,0.0039,0.0108 --center 0,0,0.2 --pitch 4e-6 --wavelength 532e-9"
run() {
  local name=$1; shift
  echo "== $name: fresnel hologram $*"
  $f hologram "$@" | tee "$out/$name.txt"
}
# Warm-up (cuBLASLt autotuning, pool growth), then the paper's speed set-up as video: bunny
# 1e5 points, 2048², tensor int8, the 8-bit phase-only hologram back per frame (an SLM's input),
# the cloud turning 3.6 degrees per frame.
run warmup $bunny --count 100000 --size 2048x2048 --algorithm tensor --phase-png "$out/warm.png" --frames 3
run bunny1e5_2048_phase $bunny --count 100000 --size 2048x2048 --algorithm tensor --spin 3.6 \
  --frames 100 --phase-png "$out/stream_last_phase.png"
# The same with the complex64 field back (32 MiB per frame).
run bunny1e5_2048_field $bunny --count 100000 --size 2048x2048 --algorithm tensor --spin 3.6 \
  --frames 30 --field-npy "$out/stream_last_field.npy"
# Smaller clouds: where per-frame overhead shows.
run bunny1e4_2048_phase $bunny --count 10000 --size 2048x2048 --algorithm tensor --spin 3.6 \
  --frames 100 --phase-png "$out/stream_last_1e4.png"
run bunny1e4_1024_phase $bunny --count 10000 --size 1024x1024 --algorithm tensor --spin 3.6 \
  --frames 200 --phase-png "$out/stream_last_1e4_1024.png"
# One-shot Render for comparison.
run bunny1e5_2048_render $bunny --count 100000 --size 2048x2048 --algorithm tensor \
  --phase-png "$out/render_phase.png"
kill -TERM $pid
wait $pid
trap - EXIT
tail -n 2 "$out/fresneld_stream.log"
