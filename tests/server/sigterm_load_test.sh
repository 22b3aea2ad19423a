#!/usr/bin/env bash
# Issue 13, Faults: SIGTERM under load. 16 clients run `fresnel bench --op mix` against fresneld;
# SIGTERM arrives mid-run. Every request either succeeds or gets UNAVAILABLE (the drain refusing
# new work, or no server to connect to afterwards) — never UNKNOWN, INTERNAL, a Fresnel CANCELLED
# or a silent loss — and fresneld exits 0. The test counts each. One exception is gRPC's, not
# ours: a call that reaches the server in the instant its listener shuts down, before any handler
# took it, is ended by gRPC core as CANCELLED with the bare message "CANCELLED" (grpc/grpc#41785,
# fix proposed upstream in #41786); those are counted and reported, not failed.
set -euo pipefail
source "$(dirname "$0")/fresneld_lib.sh"
fresneld=$1
fresnel=$2
work=$(mktemp -d)
trap 'kill -9 "${pid:-}" "${bench:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
"$fresneld" --listen 127.0.0.1:0 --metrics off --gpus none --cpu-workers 2 --drain-timeout 5 \
  2>"$work/server.log" &
pid=$!
port=$(listening_port "$work/server.log")
"$fresnel" --server "127.0.0.1:$port" bench --op mix -c 16 -d 4 --device cpu --json \
  >"$work/bench.json" 2>"$work/bench.err" &
bench=$!
sleep 1.5
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
cat "$work/server.log"
[[ $rc -eq 0 ]] || { echo "fresneld exited with $rc after SIGTERM"; exit 1; }
wait "$bench" || true  # exit 3: some requests failed, which is expected here
cat "$work/bench.json" "$work/bench.err"
python3 - "$work/bench.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r["requests_ok"]
bad, grpc_core = {}, 0
for name, w in r["workloads"].items():
    for message, n in w["error_messages"].items():
        if message == "CANCELLED: CANCELLED":
            grpc_core += n
        elif not message.startswith("UNAVAILABLE: "):
            bad[f"{name}: {message}"] = n
    if sum(w["error_messages"].values()) != w["failed"]:
        sys.exit(f"{name}: error messages do not add up to the failures: {w}")
print(f"{ok} ok, {r['requests_failed']} failed: UNAVAILABLE, and {grpc_core} bare CANCELLED "
      "from gRPC core's shutdown (grpc/grpc#41785)")
if ok == 0:
    sys.exit("no request succeeded before the SIGTERM: the test proves nothing")
if bad:
    sys.exit(f"requests ended other than OK or UNAVAILABLE: {bad}")
PY
echo "SIGTERM under load: every request OK or UNAVAILABLE, fresneld exited 0"
