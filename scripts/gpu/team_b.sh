#!/usr/bin/env bash
# The team's GPU run, call B (after team_a.sh, within 30 s): waits up to 400 s for the soak and
# up to 540 s for the fuzzers and the long racecheck, prints the soak's tables, RSS and device
# memory timeline, the racecheck's verdict and the fuzzers' executions. TEAM_BENCH=1 adds benches.
set -u
T0=$(date +%s)
exec > >(tee -a "$OUT/b.log") 2>&1
echo "== $(date -u)"
wait_s=${TEAM_B_WAIT:-540}   # the most this call waits for the soak (400 at most), fuzzers, racecheck
while [[ ! -e /tmp/soak/done ]] && (( $(date +%s) - T0 < (wait_s < 400 ? wait_s : 400) )); do sleep 5; done
echo "soak done? $(ls /tmp/soak) at $(( $(date +%s) - T0 )) s"
cat /tmp/soak/bench.log; echo "-- smi"; cat /tmp/soak/smi.log; echo "-- server log tail"; tail -20 /tmp/soak/server.log
while { [[ -d /tmp/fuzz && ! -e /tmp/fuzz/done ]] || [[ -d /tmp/race && ! -e /tmp/race/done ]]; } &&
      (( $(date +%s) - T0 < wait_s )); do sleep 5; done
if [[ -d /tmp/race ]]; then
  echo "-- long racecheck at $(( $(date +%s) - T0 )) s: $(cat /tmp/race/done 2>/dev/null || echo 'not done')"
  tail -n 8 /tmp/race/long.log; grep -c "Race reported\|Hazard" /tmp/race/long.log
fi
pkill -INT -f fuzz_ ; sleep 3
for f in /tmp/fuzz/*.log; do echo "-- $f"; grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|ERROR|SUMMARY|Done" $f | head; done
ls -la /tmp/fuzz/art-* 2>/dev/null
echo "== end $(date -u)"
# --- benches after the soak (TEAM_BENCH=0 skips them); each bounded by a timeout ---
[[ ${TEAM_BENCH:-0} == 0 ]] && exit 0
data=$PWD/.gpu/data
root=$(cd .. && pwd)
echo "== volume: Blunt Fin, 6 M, 35 M at 1024², the walk [$(( $(date +%s) - T0 )) s]"
timeout 90 fresnel_bench_volume --data "$data" --frames 10 --quick --meshes fin,6m,35m --scans walk 2>&1 | tail -40
for n in 32 16; do
  echo "== fusion service: $n sessions x 90 fps, 848x480, a connection each [$(( $(date +%s) - T0 )) s]"
  fresneld --listen 127.0.0.1:50997 --metrics off --gpus all --streams-per-gpu 16 > /tmp/fz.log 2>&1 &
  fp=$!; for i in $(seq 1 50); do fresnel --server 127.0.0.1:50997 info > /dev/null 2>&1 && break; sleep 0.2; done
  timeout 40 fresnel --server 127.0.0.1:50997 bench --op fuse --concurrency $n --fps 90 --duration 4 \
    --frame-size 848x480 --device gpu 2>&1 | tail -12
  kill -TERM $fp; wait $fp
done
echo "== hologram Stream fps, bunny 1e5, 2048² [$(( $(date +%s) - T0 )) s]"
[[ -f $data/cgh/bunny.ply ]] && timeout 90 bash "$root/tests/bench/e2e/hologram_fps.sh" "$data/cgh/bunny.ply" /tmp/holo 0 100 2>&1 | tail -8
echo "== benches end [$(( $(date +%s) - T0 )) s] $(date -u)"
