#!/usr/bin/env bash
# Installs the Debian packages Fresnel builds and tests with, when any is missing.
# CUDA is not installed here: when nvcc is present (PATH, CUDACXX or /usr/local/cuda) the build
# uses it, otherwise everything builds and runs on the CPU.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config python3
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev prometheus catch2 libcli11-dev libsndfile1-dev libpng-dev libtbb-dev
  libkissfft-dev libtiff-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
