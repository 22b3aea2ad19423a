#!/usr/bin/env bash
# SIGTERM's drain timeout holds for running work too: fresneld with --drain-timeout 1 and one CPU
# worker busy with a hologram render that needs far longer must cancel it when the timeout passes
# and exit 0 within a few seconds (it used to run the render to the end).
set -euo pipefail
source "$(dirname "$0")/fresneld_lib.sh"
fresneld=$1
fresnel=$2
src=$3
work=$(mktemp -d)
trap 'kill -9 "${pid:-}" "${client:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
"$fresneld" --listen 127.0.0.1:0 --metrics off --gpus none --cpu-workers 1 --drain-timeout 1 \
  2>"$work/server.log" &
pid=$!
port=$(listening_port "$work/server.log")
python3 "$src/scripts/make_demo_image.py" "$work/source.png" 512
# 512 x 512 image points on a 4096 x 4096 hologram: tens of seconds on the CPU.
"$fresnel" --server "127.0.0.1:$port" hologram --image "$work/source.png" --spacing 8e-6 \
  --depth 0.1 --size 4096x4096 --pitch 4e-6 --wavelength 532e-9 --device cpu \
  --phase-png "$work/phase.png" >"$work/client.log" 2>&1 &
client=$!
# Running: the CPU worker busy in two polls 0.3 s apart (a short job could be seen once).
busy() {
  "$fresnel" --server "127.0.0.1:$port" info --stats 2>/dev/null |
    awk '$1 == "cpu" && $3 == "1" {ok = 1} END {exit !ok}'
}
running=0
for _ in $(seq 100); do
  if busy && sleep 0.3 && busy; then
    running=1
    break
  fi
  sleep 0.05
done
[[ $running -eq 1 ]] || { echo "the render never started running"; "$fresnel" --server "127.0.0.1:$port" info --stats; exit 1; }
start=$(date +%s.%N)
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
elapsed=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$start" "$(date +%s.%N)")
cat "$work/server.log"
echo "fresneld exited with $rc ${elapsed} s after SIGTERM"
[[ $rc -eq 0 ]] || exit 1
grep -q "asked 1 running job(s) to stop" "$work/server.log" || { echo "the running render was not cancelled"; exit 1; }
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 6 else 1)" "$elapsed" ||
  { echo "exit took ${elapsed} s (drain timeout 1 s)"; exit 1; }
client_rc=0
wait "$client" || client_rc=$?
cat "$work/client.log"
[[ $client_rc -ne 0 ]] || { echo "the cancelled render reported success"; exit 1; }
echo "drain timeout honoured: running render cancelled, exit 0 in ${elapsed} s"
