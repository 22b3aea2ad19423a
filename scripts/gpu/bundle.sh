#!/usr/bin/env bash
# scripts/gpu/bundle.sh NAME [--data DIR]... BIN...     (run from the checkout's root)
#
# Packs BINs (stripped) and the shared libraries the lent GPU machine lacks (../shared/tools/
# gpu-bundle decides which), plus data folders, into .gpu-NAME/b.tar.xz (.gpu*/ is git-ignored).
# xz with a 512 MiB dictionary: the test binaries share most of their 27 MB (server + kernels), so
# the big window stores them about once (17 binaries + 23 MB of data: 324 MiB -> 33 MB; xz's
# default 8 MiB window gave 63 MB, too much for the 64 MiB a run may carry).
# Then put a run script in .gpu-NAME/ and call the device tool's run with carry [".gpu-NAME"]:
#   cd .gpu-NAME && tar -xJf b.tar.xz && source .gpu/env.sh && bash run.sh
# scripts/gpu/team_a.sh and team_b.sh are the whole-team run (soak, fuzzers, every [gpu] case).
set -euo pipefail
name=${1:?NAME}; shift
here=$PWD
tools=${FRESNEL_GPU_BUNDLE:-$here/../shared/tools/gpu-bundle}
scratch=$(mktemp -d /tmp/bundle-XXXX)
trap 'rm -rf "$scratch"' EXIT
git init -q "$scratch"   # gpu-bundle writes .gpu/ at the root of the checkout it runs in
args=()
while [[ $# -gt 0 && $1 == --data ]]; do args+=(--data "$(readlink -f "$2")"); shift 2; done
for b in "$@"; do args+=("$(readlink -f "$b")"); done
(cd "$scratch" && "$tools" "${args[@]}")
strip -s "$scratch"/.gpu/bin/* 2>/dev/null || true
mkdir -p "$here/.gpu-$name"
(cd "$scratch" && tar -cf - .gpu | xz -T1 --lzma2=preset=6,dict=512MiB) >"$here/.gpu-$name/b.tar.xz"
du -sh "$here/.gpu-$name/b.tar.xz"
