#!/usr/bin/env bash
# Builds of FRESNEL_VOLUME_SCAN_FILTER side by side on one GPU machine: for each variant V
# (default "off chunks all") runs test_volume_V "[gpu]" and fresnel_bench_volume_V, binaries on
# PATH (built with -DFRESNEL_VOLUME_SCAN_FILTER=OFF / CHUNKS / ALL and renamed), data under
# $1/volume. Writes $OUT/variants.txt.
set -o pipefail
data=${1:?data folder}
out=${OUT:-/tmp/volume-out}
mkdir -p "$out" /work/shared
[[ -e /work/shared/data ]] || ln -s "$data" /work/shared/data
log=$out/variants.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$log"
for v in ${VARIANTS:-off chunks all}; do
  echo "== $v: [gpu] tests" | tee -a "$log"
  timeout 120 "test_volume_$v" "[gpu]" 2>&1 | grep -E "PSNR|passed|failed|FAILED|error" |
    tee -a "$log"
  echo "== $v: bench" | tee -a "$log"
  timeout 150 "fresnel_bench_volume_$v" --data "$data" --frames 5 ${BENCH_ARGS:-} 2>&1 |
    tee -a "$log"
done
