#!/usr/bin/env bash
# Variants of fresnel_bench_volume whose walk_cuda.cu is compiled with other flags, for timing
# kernel choices side by side on one GPU machine (docs/volume.md, session 8) without a build
# tree per variant: walk_cuda.cu is compiled again with the build's own command plus FLAGS and
# linked ahead of libfresnel_kernels.a (its symbols win; the archive's walk object is not
# pulled). An INCLUDE directory, when given, goes first on the include path: a variant's
# volume/walk_math.h or volume/volume_math.h there replaces the tree's.
#
#   tests/bench/volume/build_walk_variants.sh BUILD OUT NAME "FLAGS" [INCLUDE] [NAME "FLAGS" [INCLUDE]]...
#
# BUILD must have the target built; writes OUT/TARGET_NAME. TARGET (environment): the program
# to link, fresnel_bench_volume (default) or another that links the kernels, e.g. test_volume.
# FLAGS e.g. "-DFRESNEL_VOLUME_WALK_MIN_BLOCKS=2" or "--fmad=true" (nvcc takes the last --fmad).
set -euo pipefail
build=$(readlink -f "$1"); out=$(readlink -f "$2"); shift 2
target=${TARGET:-fresnel_bench_volume}
mkdir -p "$out"
compile=$(ninja -C "$build" -t commands "$target" | grep -F 'walk_cuda.cu.o' | grep -F ' -c ' | head -1)
link=$(ninja -C "$build" -t commands "$target" | tail -1)
exe=$(grep -oE -- "-o [^ ]*/$target " <<< "$link" | head -1 | cut -c4- | tr -d ' ')
[[ -n $compile && -n $exe ]] || {
  echo "cannot find the walk_cuda.cu compile or the $target link in $build" >&2; exit 1; }
while [[ $# -ge 2 ]]; do
  name=$1 flags=$2; shift 2
  inc=""
  if [[ $# -ge 1 && -d $1 ]]; then inc="-I$(readlink -f "$1")"; shift; fi
  obj=$out/walk_$name.o
  c=${compile/ -MD -MT kernels\/CMakeFiles\/fresnel_kernels.dir\/src\/volume\/walk_cuda.cu.o -MF kernels\/CMakeFiles\/fresnel_kernels.dir\/src\/volume\/walk_cuda.cu.o.d/}
  c=${c/-o kernels\/CMakeFiles\/fresnel_kernels.dir\/src\/volume\/walk_cuda.cu.o/-o $obj}
  c=${c/ -x cu -c / $flags -Xptxas -v -x cu -c }
  [[ -n $inc ]] && c=${c/ -I/ $inc -I}
  echo "== $name: $flags ${inc:+($inc)}"
  (cd "$build" && eval "$c") 2>&1 | grep -A4 -E "Compiling entry.*WalkKernel" | grep -E "registers|spill|stack" || true
  l=${link/"-o $exe "/"-o $out/${target}_$name "}
  l=${l/ kernels\/libfresnel_kernels.a / $obj kernels\/libfresnel_kernels.a }
  (cd "$build" && eval "$l")
done
