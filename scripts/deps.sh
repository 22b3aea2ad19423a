#!/usr/bin/env bash
# Installs the Debian packages Fresnel builds and tests with, when any is missing.
# CUDA is not installed here: when nvcc is present (PATH, CUDACXX or /usr/local/cuda) the build
# uses it, otherwise everything builds and runs on the CPU.
set -euo pipefail
packages=(
  build-essential cmake ninja-build ccache pkg-config python3
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  prometheus-cpp-dev prometheus catch2 libcli11-dev libsndfile1-dev libpng-dev libtbb-dev
  libkissfft-dev libtiff-dev libssl-dev openssl yamllint python3-yaml libcairo2-dev
)
# scripts/fuzz.sh only (not the default build): clang-14 with libFuzzer and the sanitizer runtimes.
if [[ ${FRESNEL_FUZZ_DEPS:-0} == 1 ]]; then
  packages+=(clang-14 libclang-rt-14-dev)
fi
# fresnel_bench_interp --cpu only (not the build or the tests): SciPy, the CPU baseline it times.
if [[ ${FRESNEL_BENCH_DEPS:-0} == 1 ]]; then
  packages+=(python3-scipy)
fi
# Node.js runs the offline checks of deploy/ and the Dockerfile (tests/deploy); any node >= 18
# with npm will do (Debian's nodejs + npm, or one installed otherwise).
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
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

# The npm packages of tests/deploy (pinned in its package-lock.json), installed when they changed.
deploy_checks="$(dirname "$0")/../tests/deploy"
if [[ -f $deploy_checks/package-lock.json ]] &&
   ! cmp -s "$deploy_checks/package-lock.json" "$deploy_checks/node_modules/.fresnel-lock.json"; then
  echo "deps: installing the npm packages of tests/deploy"
  (cd "$deploy_checks" && npm ci --no-audit --no-fund --loglevel=error &&
   cp package-lock.json node_modules/.fresnel-lock.json)
fi
