#!/usr/bin/env bash
# The service sweep of docs/fusion_service.md "Where the tail came from" (session 8), for one
# device call: bundle fresneld, fresnel, test_fusion, test_fusion_service (scripts/gpu/bundle.sh
# fusion --data ../shared/data/fusion ...), copy this script next to b.tar.xz and run
#   cd .gpu-fusion && tar -xJf b.tar.xz && source .gpu/env.sh && bash run_service_on_gpu.sh
# Rows: 32 x 90 fps steady state (random, even), the old schedule (open: sessions start and end
# apart; "others closing" tells whether its tail is the other sessions' teardown), spin wait,
# 40 sessions; then the [gpu] tests while the time (LIMIT s, default 170) lasts. ~40 s of sweep.
set -u
T0=$(date +%s)
here=$PWD
mkdir -p /work/wt /work/shared
[[ -e /work/wt/fusion ]] || ln -s "$(cd .. && pwd)" /work/wt/fusion   # tests' baked paths
[[ -e /work/shared/data ]] || ln -s "$here/.gpu/data" /work/shared/data
exec > >(tee -a "${OUT:-.}/service.log") 2>&1
el() { echo $(( $(date +%s) - T0 )); }
echo "== $(date -u) $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader)"
fresneld --listen 127.0.0.1:50911 --metrics off --gpus all --streams-per-gpu 16 \
  --max-sessions-per-client 64 > /tmp/fz.log 2>&1 &
spid=$!; for i in $(seq 1 100); do fresnel --server 127.0.0.1:50911 info > /dev/null 2>&1 && break; sleep 0.1; done
b() { echo "== bench $* [$(el) s]"; timeout 25 fresnel --server 127.0.0.1:50911 bench --op fuse --fps 90 \
  --frame-size 848x480 --device gpu --duration 3 "$@" 2>&1 | tail -24
  echo "gpu memory now: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"; }
b --concurrency 32
b --concurrency 32 --phase even
b --concurrency 32 --phase open
b --concurrency 32 --phase open --variant 16384
b --concurrency 40
kill -TERM $spid; wait $spid; echo "-- fresneld rc=$? [$(el) s]"
for t in test_fusion_service test_fusion; do
  l=$(( ${LIMIT:-170} - $(el) )); (( l < 15 )) && { echo "SKIP (time) $t"; continue; }
  echo "== $t [gpu] (limit $l s) [$(el) s]"; timeout $l $t "[gpu]" 2>&1 | tail -4
done
echo "== end [$(el) s]"
