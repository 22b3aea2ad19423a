#!/usr/bin/env bash
# End-to-end interpolation benchmark on one machine: starts fresneld (all GPUs), drives it with
# `fresnel bench` over loopback for the BENCHMARKS.md cases, and prints each result as JSON plus
# a scrape of the metrics. Usage: interp_e2e.sh [OUT_DIR]   (fresneld and fresnel on PATH)
set -euo pipefail
out=${1:-.}
mkdir -p "$out"
port=50777
metrics=9777
fresneld --listen 127.0.0.1:$port --metrics 127.0.0.1:$metrics --max-message-bytes $((2000 << 20)) \
  --streams-per-gpu 2 --queue-length 64 2>"$out/fresneld.log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do grep -q "listening on port" "$out/fresneld.log" && break; sleep 0.1; done
f="fresnel --server 127.0.0.1:$port --timeout 600"
$f info
run() {
  local name=$1; shift
  echo "== $name: fresnel bench $*"
  $f bench "$@" | tee "$out/$name.txt"
  $f bench "$@" --json > "$out/$name.json" || true
}
# (a) float32, 2^26 samples, upfirdn up=4, 64 taps: one unary request at a time.
run a_upfirdn_2p26 --op upfirdn --samples $((1 << 26)) --up 4 --down 1 --taps 64 --device gpu --count 5 --warmup 1
# (a) streamed in 2^22-sample chunks.
run a_stream_2p26 --op stream --samples $((1 << 26)) --up 4 --down 1 --taps 64 --device gpu --chunk $((1 << 22)) --count 3 --warmup 1
# (b) resample_poly 160/147, 2^26 samples.
run b_resample_2p26 --op resample_poly --samples $((1 << 26)) --up 160 --down 147 --device gpu --count 5 --warmup 1
# (c) 64 channels x 2^20 samples, upfirdn up=4, 64 taps.
run c_upfirdn_64x2p20 --op upfirdn --channels 64 --samples $((1 << 20)) --up 4 --down 1 --taps 64 --device gpu --count 5 --warmup 1
# Small requests: throughput and latency at concurrency 16 across all GPUs.
run small_resample_c16 --op resample_poly --samples 65536 --up 160 --down 147 --device gpu --concurrency 16 --duration 5
$f info --stats
python3 - "$metrics" > "$out/metrics.txt" <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode())
PY
grep -E "^fresnel_(compute|transfer)_seconds_(sum|count)|^fresnel_device_memory" "$out/metrics.txt" || true
kill -TERM $pid
wait $pid
trap - EXIT
tail -n 2 "$out/fresneld.log"
