#!/usr/bin/env bash
# fresneld must come up, answer, and exit 0 on SIGTERM after draining.
set -euo pipefail
bin=$1
log=$(mktemp)
"$bin" --listen 127.0.0.1:0 --metrics off --gpus none --drain-timeout 5 2>"$log" &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on port" "$log" && break
  sleep 0.1
done
grep -q "listening on port" "$log" || { cat "$log"; kill "$pid"; exit 1; }
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
cat "$log"
grep -q "draining" "$log" || { echo "no drain message"; exit 1; }
[[ $rc -eq 0 ]] || { echo "fresneld exited with $rc"; exit 1; }
echo "fresneld drained and exited 0"
