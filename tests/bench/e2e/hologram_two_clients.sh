#!/usr/bin/env bash
# Two concurrent HologramService.Stream clients against one fresneld (all GPUs): does one stream
# already take what the server delivers? Usage: hologram_two_clients.sh OUT_DIR BUNNY_PLY
# (fresneld and fresnel on PATH).
set -u
out=$1; ply=$2; mkdir -p "$out"
fresneld --listen 127.0.0.1:50779 --metrics off --max-message-bytes $((256 << 20)) --streams-per-gpu 2 2>"$out/srv.log" &
pid=$!
for _ in $(seq 300); do grep -q "listening on port" "$out/srv.log" && break; sleep 0.1; done
f="fresnel --server 127.0.0.1:50779 --timeout 600"
b="hologram --points $ply --fit 0.0159,0.0039,0.0108 --center 0,0,0.2 --pitch 4e-6 --wavelength 532e-9 --count 100000 --size 2048x2048 --algorithm tensor"
$f $b --frames 3 --phase-png "$out/w.png" > /dev/null
echo "-- one client"; $f $b --frames 100 --spin 3.6 --phase-png "$out/a.png" | grep frames/s
echo "-- two clients at once"
start=$(date +%s.%N)
$f $b --frames 100 --spin 3.6 --phase-png "$out/b.png" > "$out/c1.txt" &
q1=$!
$f $b --frames 100 --spin 3.6 --phase-png "$out/c.png" > "$out/c2.txt" &
q2=$!
wait $q1 $q2
end=$(date +%s.%N)
grep frames/s "$out/c1.txt" "$out/c2.txt"
python3 -c "print('aggregate %.1f frames/s' % (200/($end-$start)))"
echo "-- field output, two clients"
start=$(date +%s.%N)
$f $b --frames 30 --spin 3.6 --field-npy "$out/f1.npy" > "$out/d1.txt" &
p1=$!
$f $b --frames 30 --spin 3.6 --field-npy "$out/f2.npy" > "$out/d2.txt" &
p2=$!
wait $p1 $p2
end=$(date +%s.%N)
grep frames/s "$out/d1.txt" "$out/d2.txt"
python3 -c "print('aggregate %.1f frames/s' % (60/($end-$start)))"
kill -TERM $pid; wait $pid
