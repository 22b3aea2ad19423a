#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (a separate configuration: clang-14, CUDA off,
# -fsanitize=fuzzer,address,undefined; see cmake/sanitize.cmake) and runs each one over its seed
# corpus (tests/fuzz/corpus/<name>) for a number of executions. docs/fuzzing.md has the details.
#
#   scripts/fuzz.sh                    every harness, FRESNEL_FUZZ_RUNS executions each
#   scripts/fuzz.sh vtk ply            only these
#   FRESNEL_FUZZ_RUNS=10000000 scripts/fuzz.sh      the long run (>= 10 M executions each)
#   FRESNEL_FUZZ_SECONDS=120 scripts/fuzz.sh        a time budget per harness instead
#
# New inputs go to $build/fuzz-corpus/<name> (the committed seeds are only read); crashes, leaks
# and timeouts to $build/fuzz-artifacts/<name>/. Exits non-zero when any harness finds one.
set -euo pipefail
cd "$(dirname "$0")/.."
FRESNEL_FUZZ_DEPS=1 bash scripts/deps.sh
build=${FRESNEL_FUZZ_BUILD_DIR:-build-fuzz}
runs=${FRESNEL_FUZZ_RUNS:-100000}
jobs=${FRESNEL_JOBS:-$(nproc)}
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 \
  -DCMAKE_CXX_COMPILER=clang++-14 -DFRESNEL_ENABLE_CUDA=OFF -DFRESNEL_BUILD_TESTS=OFF \
  -DFRESNEL_FUZZ=ON "${launcher[@]}"

if (($#)); then
  names=("$@")
else
  names=()
  for dir in tests/fuzz/corpus/*/; do names+=("$(basename "$dir")"); done
fi
targets=()
for name in "${names[@]}"; do targets+=("fuzz_$name"); done
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

# The file-reader harnesses write each input to a scratch file under TMPDIR: on a disk-backed /tmp
# that alone made them 7x slower (pose 3.7 k/s against 25 k/s on tmpfs), so use /dev/shm.
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then export TMPDIR=/dev/shm; fi
limit=(-runs="$runs")
[[ -n ${FRESNEL_FUZZ_SECONDS:-} ]] && limit=(-max_total_time="$FRESNEL_FUZZ_SECONDS")
failed=()
for name in "${names[@]}"; do
  work="$build/fuzz-corpus/$name"
  artifacts="$build/fuzz-artifacts/$name/"
  mkdir -p "$work" "$artifacts"
  echo "== fuzz_$name ${limit[*]}"
  start=$(date +%s)
  # 2 GiB RSS, 1 GiB per allocation (a reader asked for more by a small file is a finding),
  # 10 s per input.
  if ! "$build/tests/fuzz/fuzz_$name" "${limit[@]}" -rss_limit_mb=2048 -malloc_limit_mb=1024 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts" \
      "$work" "tests/fuzz/corpus/$name" 2>"$build/fuzz-$name.log"; then
    failed+=("$name")
    tail -n 40 "$build/fuzz-$name.log"
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$build/fuzz-$name.log" || true
  echo "   $(( $(date +%s) - start )) s"
done
if ((${#failed[@]})); then
  echo "fuzz: findings in ${failed[*]} (inputs under $build/fuzz-artifacts/)"
  exit 1
fi
echo "fuzz: ${#names[@]} harnesses clean"
