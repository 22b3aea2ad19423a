# Sourced by the device-call scripts under tests/bench (h200_transport.sh, h200_before_after.sh,
# unwrap/session10_staging.sh): `step SECONDS TITLE COMMAND...` runs COMMAND under its own
# timeout with its output appended to "$log" (set by the caller), and prints the title and the
# exit status with the seconds it took. Also records the GPU's name and driver in "$log".
step() {
  local t=$1 title=$2
  shift 2
  echo "=== $title: $*" | tee -a "$log"
  local start=$SECONDS
  timeout "$t" "$@" >>"$log" 2>&1
  echo "=== rc $? in $((SECONDS - start)) s" | tee -a "$log"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >>"$log" 2>&1
