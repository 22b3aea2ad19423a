#!/usr/bin/env bash
# The real binaries with bearer tokens: `fresnel` without a token gets UNAUTHENTICATED, with one
# it works; SIGHUP makes fresneld reload --token-file (main.cc's signal loop); with
# --metrics-auth, /metrics answers 401 unless given an admin token as HTTP basic auth.
set -euo pipefail
fresneld=$1
fresnel=$2
dir=$(mktemp -d)
pid=
cleanup() { [[ -n $pid ]] && kill "$pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
printf 'alice alice-0123456789abcdef\nroot root-0123456789abcdef0 admin\n' >"$dir/tokens"
echo alice-0123456789abcdef >"$dir/alice"
echo carol-0123456789abcdef >"$dir/carol"
metrics_port=$((20000 + ($$ + 7919) % 20000))
"$fresneld" --listen 127.0.0.1:0 --metrics 127.0.0.1:$metrics_port --metrics-auth \
  --token-file "$dir/tokens" --gpus none 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on port" "$dir/log" && break
  sleep 0.1
done
grep -q "listening on port" "$dir/log" || { cat "$dir/log"; exit 1; }
grep -q "bearer tokens" "$dir/log" || { echo "startup line does not say 'bearer tokens'"; exit 1; }
port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$dir/log")
cli() { "$fresnel" --server "127.0.0.1:$port" --timeout 10 "$@"; }
fail() { echo "FAIL: $*"; cat "$dir/log"; exit 1; }
# Sends SIGHUP and waits for fresneld to log `pattern` for it.
hup() {
  local before
  before=$(grep -c "SIGHUP" "$dir/log" || true)
  kill -HUP "$pid"
  for _ in $(seq 50); do
    [[ $(grep -c "SIGHUP" "$dir/log" || true) -gt $before ]] && break
    sleep 0.1
  done
  tail -1 "$dir/log" | grep -q "$1" || fail "after SIGHUP, no '$1' in the log"
}

rc=0; cli info >"$dir/out" 2>&1 || rc=$?
[[ $rc -eq 3 ]] && grep -q UNAUTHENTICATED "$dir/out" || fail "no token: rc $rc, $(cat "$dir/out")"
cli --token-file "$dir/alice" info >/dev/null || fail "alice's token was refused"
FRESNEL_TOKEN=alice-0123456789abcdef cli info >/dev/null || fail "FRESNEL_TOKEN was refused"
rc=0; cli --token-file "$dir/carol" info >"$dir/out" 2>&1 || rc=$?
[[ $rc -eq 3 ]] || fail "carol's token worked before the reload"

# SIGHUP: carol in, alice out.
printf 'carol carol-0123456789abcdef\nroot root-0123456789abcdef0 admin\n' >"$dir/tokens"
hup "SIGHUP: reloaded"
cli --token-file "$dir/carol" info >/dev/null || fail "carol's token refused after the reload"
rc=0; cli --token-file "$dir/alice" info >/dev/null 2>&1 || rc=$?
[[ $rc -eq 3 ]] || fail "alice's token still works after the reload"
# A broken file keeps the tokens in force.
echo "carol short" >"$dir/tokens"
hup "kept the previous tokens"
cli --token-file "$dir/carol" info >/dev/null || fail "a broken file dropped carol's token"

python3 - "$metrics_port" <<'PY' || fail "/metrics auth"
import base64, sys, urllib.error, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/metrics"
def status(user=None, password=None):
    req = urllib.request.Request(url)
    if user is not None:
        cred = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {cred}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read().decode()
            return r.status, body
    except urllib.error.HTTPError as e:
        return e.code, ""
for args, want in [((), 401), (("carol", "carol-0123456789abcdef"), 401),
                   (("carol", "root-0123456789abcdef0"), 401), (("root", "x" * 22), 401),
                   (("root", "root-0123456789abcdef0"), 200)]:
    code, body = status(*args)
    assert code == want, (args, code, want)
    if want == 200:
        assert "# TYPE fresnel_" in body, body[:200]
print("metrics auth ok")
PY
kill -TERM "$pid"
wait "$pid" || fail "fresneld exited with $?"
pid=

# The CLI's TLS flags against a TLS server (a self-signed certificate for 127.0.0.1).
echo "carol carol-0123456789abcdef" >"$dir/tokens"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -keyout "$dir/server.key" -out "$dir/server.pem" -subj "/CN=fresnel test" \
  -addext "subjectAltName=IP:127.0.0.1,DNS:fresnel.test" >/dev/null 2>&1
"$fresneld" --listen 127.0.0.1:0 --metrics off --gpus none --tls-cert "$dir/server.pem" \
  --tls-key "$dir/server.key" --token-file "$dir/tokens" 2>"$dir/log" &
pid=$!
for _ in $(seq 100); do
  grep -q "listening on port" "$dir/log" && break
  sleep 0.1
done
grep -q "TLS, bearer tokens" "$dir/log" || fail "startup line does not say 'TLS, bearer tokens'"
port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$dir/log")
cli --tls-ca "$dir/server.pem" --token-file "$dir/carol" info >/dev/null || fail "TLS + token"
cli --tls-ca "$dir/server.pem" --tls-server-name fresnel.test --token-file "$dir/carol" info \
  >/dev/null || fail "--tls-server-name"
rc=0; cli --token-file "$dir/carol" info >/dev/null 2>&1 || rc=$?
[[ $rc -eq 3 ]] || fail "a plaintext CLI reached the TLS server (rc $rc)"
rc=0; cli --tls-ca "$dir/server.pem" info >"$dir/out" 2>&1 || rc=$?
[[ $rc -eq 3 ]] && grep -q UNAUTHENTICATED "$dir/out" || fail "TLS without a token: $(cat "$dir/out")"
kill -TERM "$pid"
wait "$pid" || fail "fresneld exited with $?"
pid=
echo "tokens, SIGHUP reload, /metrics auth and the CLI's TLS flags behave"
