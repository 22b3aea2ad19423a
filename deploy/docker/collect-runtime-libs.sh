#!/usr/bin/env bash
# Copies the shared libraries that PREFIX/bin/* load (as ldd resolves them in the build stage)
# into PREFIX/runtime-lib, leaving out the C runtime that every Debian 12 image already has and
# the NVIDIA driver (injected by the container toolkit). The runtime stage copies that folder and
# nothing else, so the image holds only the binaries and what they need.
set -euo pipefail
prefix=$1
mkdir -p "$prefix/runtime-lib"
base='^(linux-vdso|ld-linux|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|libnvidia-)[.-]'
for bin in "$prefix"/bin/*; do
  deps=$(ldd "$bin")
  if grep -q "not found" <<<"$deps"; then
    echo "$bin: unresolved libraries:" >&2
    grep "not found" <<<"$deps" >&2
    exit 1
  fi
  awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' <<<"$deps" | while read -r name path; do
    if [[ $name =~ $base ]]; then continue; fi
    cp -L -n "$path" "$prefix/runtime-lib/$name"
  done
done
ls "$prefix/runtime-lib" | wc -l | xargs echo "runtime libraries:"
