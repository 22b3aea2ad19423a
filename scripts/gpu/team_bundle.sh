#!/usr/bin/env bash
# Builds (in ${FRESNEL_BUILD_DIR:-build}, and the two fuzzers in build-fuzz) and bundles what
# team_a.sh / team_b.sh run into .gpu-team/: fresneld, fresnel, every test binary with [gpu]
# cases, the benches, fuzz_tiff and fuzz_resample_stream, and ../shared/data's fusion, volume and
# cgh folders. Then, with the device tool:
#   run  carry [".gpu-team"]  cd .gpu-team && tar -xJf b.tar.xz && source .gpu/env.sh && bash ../scripts/gpu/team_a.sh
#   run  (within 30 s)        cd .gpu-team && source .gpu/env.sh && bash ../scripts/gpu/team_b.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
b=${FRESNEL_BUILD_DIR:-build}
tests=(kernels/interp/test_interp kernels/unwrap/test_unwrap kernels/hologram/test_hologram
       kernels/volume/test_volume kernels/fusion/test_fusion server/test_server server/test_sessions
       server/test_hologram_service server/test_unwrap_service server/test_fusion_service
       server/test_volume_service server/test_shm server/test_inline_staging server/test_cuda_ipc
       server/cuda_ipc_peer)
benches=(interp/fresnel_bench_interp fusion/fresnel_bench_fusion volume/fresnel_bench_volume
         hologram/fresnel_bench_hologram unwrap/fresnel_bench_unwrap
         transport/fresnel_bench_transport)
targets=(fresneld fresnel)
for t in "${tests[@]}" "${benches[@]}"; do targets+=("$(basename "$t")"); done
cmake --build "$b" -j "${FRESNEL_JOBS:-$(nproc)}" --target "${targets[@]}"
fuzz=${FRESNEL_GPU_FUZZ:-1}   # 0: no fuzzers in the bundle (team_a.sh then starts none)
fuzzers=(${FRESNEL_GPU_FUZZERS:-tiff resample_stream})   # the harnesses to bundle
((fuzz)) && FRESNEL_FUZZ_RUNS=1 bash scripts/fuzz.sh "${fuzzers[@]}" >/dev/null
bins=("$b/server/fresneld" "$b/client/fresnel")
for t in "${tests[@]}"; do bins+=("$b/tests/$t"); done
for t in "${benches[@]}"; do bins+=("$b/tests/bench/$t"); done
bins+=(${FRESNEL_GPU_EXTRA:-})   # more binaries, e.g. another build's bench for an A/B
if ((fuzz)); then for f in "${fuzzers[@]}"; do bins+=("build-fuzz/tests/fuzz/fuzz_$f"); done; fi
data=()
for d in fusion volume cgh; do [[ -d ../shared/data/$d ]] && data+=(--data "../shared/data/$d"); done
bash scripts/gpu/bundle.sh team "${data[@]}" "${bins[@]}"
