#!/usr/bin/env bash
# FRESNEL_STREAM_TRACE=1: a stream's end prints one line of where its time went on fresneld's
# stderr (server/rpc/ordered_stream.h), counting its requests (frames + the end message) and
# answers; without the variable nothing is printed.
set -euo pipefail
source "$(dirname "$0")/fresneld_lib.sh"
fresneld=$1
fresnel=$2
src=$3
work=$(mktemp -d)
trap 'kill -9 "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
python3 "$src/scripts/make_demo_image.py" "$work/source.png" 16
run() {  # run LOG [ENV...]: fresneld with the environment, one 3-frame hologram Stream, stopped
  local log=$1
  shift
  env "$@" "$fresneld" --listen 127.0.0.1:0 --metrics off --gpus none --cpu-workers 1 2>"$log" &
  pid=$!
  local port
  port=$(listening_port "$log")
  "$fresnel" --server "127.0.0.1:$port" hologram --image "$work/source.png" --spacing 8e-6 \
    --depth 0.1 --size 64x64 --pitch 4e-6 --wavelength 532e-9 --device cpu --frames 3 \
    --phase-png "$work/phase.png" >"$work/client.log" 2>&1 || { cat "$work/client.log"; exit 1; }
  kill -TERM "$pid"
  wait "$pid" || true
}
run "$work/traced.log" FRESNEL_STREAM_TRACE=1
grep -E "^stream trace Stream: 4 requests, 3 answers in [0-9.]+ s, depth [0-9]+ \| per request: read wait [0-9.]+ ms, OnRequest [0-9.]+ ms, paused at depth [0-9.]+ ms \([0-9]+ pauses\) \| per answer: write [0-9.]+ ms, of it inside StartWrite [0-9.]+ ms \(3 messages\)$" \
  "$work/traced.log" || { echo "no trace line"; cat "$work/traced.log"; exit 1; }
run "$work/plain.log"
if grep -q "stream trace" "$work/plain.log"; then echo "traced without FRESNEL_STREAM_TRACE"; exit 1; fi
echo "ok"
