#!/usr/bin/env bash
# Rebuilds docs/BENCHMARKS.md from the per-workload sections in docs/bench/*.md (each written by
# whoever ran that benchmark on the GPU machine, with date, device, command and numbers).
set -euo pipefail
cd "$(dirname "$0")/.."
{
  cat <<'HEAD'
# Benchmarks

Every number here was measured on a lent NVIDIA H200 (the `device` tool) with binaries built on
the 2-core development machine (Release, `-arch=sm_90`, static CUDA runtime). Each section gives
the date, the machine, the exact command and the raw table; the per-section sources are in
`docs/bench/`. Timing assertions never appear in tests: the tests check correctness, these tables
prove speed.

HEAD
  for f in docs/bench/interp.md docs/bench/e2e.md docs/bench/hologram.md docs/bench/unwrap.md \
           docs/bench/fusion.md docs/bench/volume.md docs/bench/transport.md docs/bench/load.md \
           docs/bench/multigpu.md; do
    [[ -f $f ]] || continue
    cat "$f"
    echo
  done
} > docs/BENCHMARKS.md
echo "wrote docs/BENCHMARKS.md"
