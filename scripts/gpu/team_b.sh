#!/usr/bin/env bash
# The team's GPU run, call B (after team_a.sh, within 30 s): waits up to 400 s for the soak and
# up to 540 s for the fuzzers, prints the soak's tables, RSS and device memory timeline, and
# the fuzzers' executions. Add benches after the soak's end if time is left.
set -u
T0=$(date +%s)
exec > >(tee -a "$OUT/b.log") 2>&1
echo "== $(date -u)"
while [[ ! -e /tmp/soak/done ]] && (( $(date +%s) - T0 < 400 )); do sleep 5; done
echo "soak done? $(ls /tmp/soak) at $(( $(date +%s) - T0 )) s"
cat /tmp/soak/bench.log; echo "-- smi"; cat /tmp/soak/smi.log; echo "-- server log tail"; tail -20 /tmp/soak/server.log
while [[ -d /tmp/fuzz && ! -e /tmp/fuzz/done ]] && (( $(date +%s) - T0 < 540 )); do sleep 5; done
pkill -INT -f fuzz_ ; sleep 3
for f in /tmp/fuzz/*.log; do echo "-- $f"; grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|ERROR|SUMMARY|Done" $f | head; done
ls -la /tmp/fuzz/art-* 2>/dev/null
echo "== end $(date -u)"
