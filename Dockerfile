# syntax=docker/dockerfile:1
# Fresnel in two stages (docs/DEPLOY.md):
#   build    Debian 12 + NVIDIA's CUDA 13.0 toolkit for Debian 12; installs the project's packages
#            with scripts/deps.sh and builds and tests with scripts/test.sh, the very commands the
#            README gives (GPU test cases skip: a docker build sees no GPU).
#   runtime  Debian 12 slim with only fresneld, fresnel and the shared libraries they load,
#            collected by deploy/docker/collect-runtime-libs.sh. The CUDA runtime is linked
#            statically; the driver comes from the NVIDIA container toolkit at run time.
# Why not the nvidia/cuda Ubuntu images: scripts/deps.sh targets Debian 12 (gRPC 1.51,
# prometheus-cpp, Catch2 v2); Ubuntu 24.04 ships Catch2 v3 and 22.04 has no prometheus-cpp.
#   docker build -t fresnel .
#   docker run --gpus all -p 50051:50051 -p 9464:9464 fresnel
ARG CUDA_PACKAGE_VERSION=13-0

FROM debian:12 AS build
ARG CUDA_PACKAGE_VERSION
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/cuda-keyring.deb
RUN dpkg -i /tmp/cuda-keyring.deb \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      cuda-nvcc-${CUDA_PACKAGE_VERSION} cuda-cudart-dev-${CUDA_PACKAGE_VERSION} cuda-cccl-${CUDA_PACKAGE_VERSION} \
      libcublas-dev-${CUDA_PACKAGE_VERSION} libcufft-dev-${CUDA_PACKAGE_VERSION} \
 && rm -rf /var/lib/apt/lists/* /tmp/cuda-keyring.deb
WORKDIR /src
# deps.sh first, alone, so that its layer is cached until the package list changes.
COPY scripts/deps.sh scripts/
COPY tests/deploy/package.json tests/deploy/package-lock.json tests/deploy/
RUN bash scripts/deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN FRESNEL_BUILD_DIR=/build bash scripts/test.sh \
 && cmake --install /build --prefix /opt/fresnel \
 && bash deploy/docker/collect-runtime-libs.sh /opt/fresnel

FROM debian:12-slim AS runtime
COPY --from=build /opt/fresnel/bin/ /opt/fresnel/bin/
COPY --from=build /opt/fresnel/runtime-lib/ /opt/fresnel/lib/
RUN groupadd --system --gid 10001 fresnel \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin fresnel
ENV PATH=/opt/fresnel/bin:/usr/local/bin:/usr/bin:/bin \
    LD_LIBRARY_PATH=/opt/fresnel/lib \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    FRESNEL_LISTEN=0.0.0.0:50051 \
    FRESNEL_METRICS=0.0.0.0:9464
USER 10001:10001
# gRPC, Prometheus /metrics.
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["fresnel", "--server", "127.0.0.1:50051", "--timeout", "3", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["fresneld"]
