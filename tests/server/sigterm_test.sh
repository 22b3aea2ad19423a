#!/usr/bin/env bash
# The real fresneld binary must come up with its /metrics endpoint (scraped here, and checked with
# promtool when installed), and exit 0 on SIGTERM after draining.
set -euo pipefail
bin=$1
log=$(mktemp)
metrics_port=$((20000 + $$ % 20000))
"$bin" --listen 127.0.0.1:0 --metrics 127.0.0.1:$metrics_port --gpus none --drain-timeout 5 \
  2>"$log" &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on port" "$log" && break
  sleep 0.1
done
grep -q "listening on port" "$log" || { cat "$log"; kill "$pid" 2>/dev/null; exit 1; }
python3 - "$metrics_port" >"$log.metrics" <<'PY'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())
PY
grep -q "^# TYPE fresnel_" "$log.metrics" || {
  echo "no fresnel metrics at /metrics"; cat "$log.metrics"; kill "$pid"; exit 1; }
if command -v promtool >/dev/null; then
  promtool check metrics <"$log.metrics" || { kill "$pid"; exit 1; }
fi
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
cat "$log"
grep -q "draining" "$log" || { echo "no drain message"; exit 1; }
[[ $rc -eq 0 ]] || { echo "fresneld exited with $rc"; exit 1; }
echo "fresneld drained and exited 0"
