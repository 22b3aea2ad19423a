#!/usr/bin/env bash
# The Fresnel demo: builds fresneld and the fresnel CLI, starts the server on loopback, sends real
# work through the CLI, writes viewable results to demo-out/, and stops the server with SIGTERM.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${FRESNEL_BUILD_DIR:-build}
out=${FRESNEL_DEMO_OUT:-demo-out}
port=${FRESNEL_DEMO_PORT:-50551}
metrics_port=${FRESNEL_DEMO_METRICS_PORT:-9551}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j "$(nproc)" --target fresneld fresnel
mkdir -p "$out"
fresneld=$build/server/fresneld
fresnel="$build/client/fresnel --server 127.0.0.1:$port"

"$fresneld" --listen "127.0.0.1:$port" --metrics "127.0.0.1:$metrics_port" 2>"$out/fresneld.log" &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "listening on port" "$out/fresneld.log" && break; sleep 0.1; done

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "server info"
$fresnel info

step "input: a 2 s stereo chirp at 44.1 kHz (generated)"
python3 scripts/make_demo_signal.py "$out/chirp_44k1.wav" 44100 2.0

step "resample_poly 44.1 kHz -> 48 kHz (160/147), with a plot"
$fresnel interp "$out/chirp_44k1.wav" "$out/chirp_48k.wav" --up 160 --down 147 \
  --png "$out/resample_160_147.png"

step "classic interpolation: upfirdn(4 * firwin(12, 1/4, hamming), x, up=4) on NPY"
$fresnel interp "$out/chirp_44k1.wav" "$out/chirp_up4.npy" --mode upfirdn --up 4 \
  --taps-design 12,0.25 --window hamming --png "$out/upfirdn_x4.png"

step "the same signal streamed in 4096-sample chunks (ResampleStream)"
$fresnel interp "$out/chirp_44k1.wav" "$out/chirp_48k_stream.wav" --up 160 --down 147 --chunk 4096

step "the same-host fast path: signal and result through a POSIX shared-memory region (--shm)"
$fresnel interp "$out/chirp_44k1.wav" "$out/chirp_48k_shm.wav" --up 160 --down 147 --shm

step "scipy.signal.resample (FFT method, Hann spectral window) and decimate (FIR, zero phase), with plots"
$fresnel interp "$out/chirp_44k1.wav" "$out/chirp_48k_fft.wav" --mode fft --up 160 --down 147 \
  --window hann --png "$out/resample_fft.png"
$fresnel interp "$out/chirp_44k1.wav" "$out/chirp_decimate4.wav" --mode decimate --up 1 --down 4 \
  --png "$out/decimate_4.png"

step "load: 3 s of resample_poly requests at concurrency 4"
$fresnel bench --op resample_poly --samples 65536 --up 160 --down 147 --concurrency 4 --duration 3
echo "mixed load: 8 independent clients rotating upfirdn, resample_poly, render and unwrap for 3 s"
$fresnel bench --op mix --concurrency 8 --duration 3

step "phase unwrapping: a synthetic interferogram (256 x 320, two vortex pairs, a masked dead area)"
python3 scripts/make_demo_phase.py "$out/phase_wrapped.npy" "$out/phase_mask.npy" 256 320
$fresnel unwrap "$out/phase_wrapped.npy" --mask "$out/phase_mask.npy" --method goldstein \
  --out "$out/phase_unwrapped.npy" --png "$out/unwrap_before_after.png"
$fresnel unwrap "$out/phase_wrapped.npy" --mask "$out/phase_mask.npy" --method lsq --sync \
  --out "$out/phase_unwrapped_lsq.npy"
# The same job with the phase, the mask and every result through a shared-memory region.
$fresnel unwrap "$out/phase_wrapped.npy" --mask "$out/phase_mask.npy" --method goldstein \
  --out "$out/phase_unwrapped_shm.npy" --shm
cmp "$out/phase_unwrapped.npy" "$out/phase_unwrapped_shm.npy" && echo "shm result identical"
$fresnel jobs list
ls -l "$out"/phase_*.npy "$out/unwrap_before_after.png"

step "hologram: a 64 x 64 image 10 cm in front of a 512 x 512 hologram (8 um pitch, 532 nm)"
python3 scripts/make_demo_image.py "$out/hologram_source.png" 64
$fresnel hologram --image "$out/hologram_source.png" --spacing 32e-6 --depth 0.1 \
  --size 512x512 --pitch 8e-6 --wavelength 532e-9 --phase-png "$out/hologram_phase.png" \
  --reconstruct 0.1 --reconstruct-png "$out/hologram_reconstruction.png"
echo "holographic video: the same plane as 8 frames over one Stream call, rendered pipelined"
$fresnel hologram --image "$out/hologram_source.png" --spacing 32e-6 --depth 0.1 \
  --size 256x256 --pitch 8e-6 --wavelength 532e-9 --frames 8 --phase-png "$out/hologram_video_last.png"

step "fusion: a synthetic room (60 noisy 320 x 240 depth frames, known poses) fused in one session"
$fresnel fuse "$out/fusion_room" --generate 60 --voxel-size 0.01 --truncation 0.06 \
  --budget-mib 64 --view-every 30 --out-dir "$out/fusion"
ls -l "$out/fusion/view.png" "$out/fusion/mesh.ply"
step "volume render: a generated tetrahedral mesh with a hole and a notch (6 x 24^3 tets), then a turntable"
$fresnel render --generate hole:24 --write-vtk "$out/volume_mesh.vtk" --size 512x512 \
  --camera "azimuth=35 elevation=25" --out "$out/volume_render.png"
$fresnel render "$out/volume_mesh.vtk" --size 256x256 --orbit 12 --out "$out/volume_orbit.png"

step "a few lines of the Prometheus metrics"
python3 - "$metrics_port" "$out/metrics.txt" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics").read().decode()
open(sys.argv[2], "w").write(text)
for line in text.splitlines():
    if line.startswith("fresnel_request_duration_seconds_count") or line.startswith("fresnel_compute_seconds_count"):
        print(line)
PY

step "stopping the server (SIGTERM drains accepted work)"
kill -TERM $server_pid
wait $server_pid
trap - EXIT
tail -n 2 "$out/fresneld.log"
echo
echo "Results in $out/: chirp_48k.wav, chirp_up4.npy, resample_160_147.png, upfirdn_x4.png,"
echo "  chirp_48k_shm.wav (via shared memory), resample_fft.png, decimate_4.png,"
echo "  phase_unwrapped.npy (phase_unwrapped_shm.npy: the same via shared memory), unwrap_before_after.png, hologram_phase.png,"
echo "  hologram_reconstruction.png, hologram_video_last.png, metrics.txt"
echo "  fusion/view.png (the fused room, shaded), fusion/mesh.ply, fusion/trajectory.txt"
echo "  volume_render.png (volume rendering), volume_orbit_000..011.png (turntable), volume_mesh.vtk"
