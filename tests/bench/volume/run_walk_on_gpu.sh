#!/usr/bin/env bash
# The GPU session behind docs/volume.md "Ray walk": [gpu] tests of the default build and of the
# FRESNEL_VOLUME_AUTO_METHOD=WALK build (binaries test_volume_walk, fresnel_bench_volume_walk),
# the bench (one-pass cell projection against the walk), memcheck of the walk kernels. Expects a
# gpu-bundle of the four binaries with --data .../volume, unpacked and `source .gpu/env.sh` done
# (/work/prompts/bundle.sh), run from the folder holding .gpu; writes $OUT.
set -o pipefail
out=${OUT:-/tmp/volume-out}
mkdir -p "$out" /work/shared
ln -sfn "$PWD/.gpu/data" /work/shared/data
log=$out/log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$log"
for t in test_volume_walk test_volume; do
  echo "== $t [gpu]" | tee -a "$log"
  SECONDS=0
  timeout 45 "$t" "[gpu]" -d yes > "$out/$t.txt" 2>&1; echo "rc=$? wall ${SECONDS} s" | tee -a "$log"
  grep -E "^[0-9.]+ s:|PSNR|kAuto|passed|failed|FAILED|with expansion|error" -A1 "$out/$t.txt" |
    grep -v "^--" | head -80 | tee -a "$log"
done
echo "== bench" | tee -a "$log"
SECONDS=0
timeout 60 fresnel_bench_volume_walk --data "$PWD/.gpu/data" --frames 5 --quick \
  --meshes fin,6m,35m --scans one,walk 2>&1 | tee -a "$log"
echo "bench wall ${SECONDS} s" | tee -a "$log"
echo "== memcheck (ray walk)" | tee -a "$log"
SECONDS=0
timeout 30 compute-sanitizer --tool memcheck --error-exitcode 9 test_volume_walk "GPU ray walk*" > "$out/memcheck.txt" 2>&1; echo "rc=$? wall ${SECONDS} s" | tee -a "$log"
tail -3 "$out/memcheck.txt" | tee -a "$log"
echo "== bench fin, f32" | tee -a "$log"
timeout 12 fresnel_bench_volume_walk --data "$PWD/.gpu/data" --frames 5 --meshes fin --scans walk 2>&1 | tee -a "$log"
