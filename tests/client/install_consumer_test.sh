#!/usr/bin/env bash
# Installs the build tree BUILD_DIR into a temporary prefix and builds the consumer project
# (find_package(fresnel) + fresnel::client) against it, then runs it.
# Usage: install_consumer_test.sh BUILD_DIR CONSUMER_SOURCE_DIR [GENERATOR] [CXX_COMPILER]
set -euo pipefail
build_dir=$1
consumer_src=$2
generator=${3:-Ninja}
cxx=${4:-c++}
work=$(mktemp -d "${TMPDIR:-/tmp}/fresnel-install-test.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== cmake --install $build_dir --prefix $work/prefix"
cmake --install "$build_dir" --prefix "$work/prefix" > "$work/install.log" || {
  cat "$work/install.log"; exit 1; }
test -f "$work/prefix/include/fresnel/client/client.h"
test -x "$work/prefix/bin/fresnel"
ls "$work/prefix"/lib*/cmake/fresnel/fresnelConfig.cmake

echo "== configure and build the consumer"
cmake -S "$consumer_src" -B "$work/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release
cmake --build "$work/build"

echo "== run the consumer"
"$work/build/fresnel_consumer"
