# Sourced by the shell tests that start the real fresneld.
# listening_port LOG: waits up to 10 s for fresneld's "listening on port N" line in LOG and prints
# N; prints the log and fails when it never comes.
listening_port() {
  local log=$1 port=
  for _ in $(seq 100); do
    grep -q "listening on port" "$log" && break
    sleep 0.1
  done
  port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log")
  [[ -n $port ]] || { cat "$log" >&2; return 1; }
  echo "$port"
}
