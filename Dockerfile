# herd container image: the `herd` binary, the llama.cpp runner and its engine libraries, laid
# out flat in /opt/herd as the release build leaves them (herd finds its runner beside itself,
# the runner its libraries by RUNPATH=$ORIGIN).
#
#   CPU (default):  docker build -t herd --build-arg HERD_GIT_COMMIT=$(git rev-parse HEAD) .
#   CUDA:           docker build -t herd:cuda --build-arg HERD_GPU=cuda \
#                     --build-arg BUILD_IMAGE=nvidia/cuda:12.6.3-devel-ubuntu24.04 \
#                     --build-arg RUNTIME_IMAGE=nvidia/cuda:12.6.3-runtime-ubuntu24.04 .
#   Run:            docker run -p 11434:11434 -v herd:/var/lib/herd herd      (CUDA: add --gpus all)
ARG BUILD_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
# Where /out (the files of /opt/herd) comes from: the `build` stage below, or an image holding a
# build made outside (scripts/container-check, where no base image can be pulled).
ARG ARTIFACTS=build

FROM ${BUILD_IMAGE} AS build
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      ca-certificates curl cmake ninja-build ccache libclang-dev g++ patch pkg-config unzip \
      python3-pip python3-venv \
    && rm -rf /var/lib/apt/lists/*
# A CUDA devel image has no Rust toolchain: install one (rust:* images already have cargo).
ENV PATH=/root/.cargo/bin:/usr/local/cargo/bin:${PATH}
RUN command -v cargo >/dev/null \
    || curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain stable
WORKDIR /src
COPY . .
# HERD_GPU=cuda builds the CUDA backend module (needs the CUDA toolkit of a devel BUILD_IMAGE).
ARG HERD_GPU=cpu
# .git is not in the context (.dockerignore): pass the commit for /api/version and herd archive,
# e.g. --build-arg HERD_GIT_COMMIT=$(git rev-parse HEAD).
ARG HERD_GIT_COMMIT=unknown
ENV HERD_GIT_COMMIT=${HERD_GIT_COMMIT}
ARG CMAKE_CUDA_ARCHITECTURES=80;86;89;90
ENV HERD_GPU=${HERD_GPU} HERD_CACHE=/cache CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES}
# target/ and the llama.cpp build are cache mounts, so the artifacts are copied out in the same
# step. Every copy must succeed: a build without its runner or libraries fails here.
RUN --mount=type=cache,target=/cache --mount=type=cache,target=/src/target \
    cargo build --release --workspace --bins \
 && mkdir -p /out \
 && cp -P target/release/herd target/release/runner-llamacpp /out/ \
 && cp -P target/release/*.so target/release/*.so.* /out/ \
 && /out/runner-llamacpp --version

FROM ${ARTIFACTS} AS artifacts

FROM ${RUNTIME_IMAGE}
# A base made with these packages already (scripts/container-check) needs no network here.
RUN dpkg -s ca-certificates libgomp1 >/dev/null 2>&1 \
    || { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
           ca-certificates libgomp1 && rm -rf /var/lib/apt/lists/*; }
COPY --from=artifacts /out/ /opt/herd/
ENV OLLAMA_HOST=0.0.0.0:11434 OLLAMA_MODELS=/var/lib/herd/models HOME=/var/lib/herd \
    PATH=/opt/herd:${PATH}
VOLUME /var/lib/herd
EXPOSE 11434
# `herd doctor --ready` GETs /readyz on OLLAMA_HOST: no curl needed in the image.
HEALTHCHECK --interval=15s --timeout=10s --start-period=30s --retries=3 \
    CMD ["/opt/herd/herd", "doctor", "--ready"]
ENTRYPOINT ["/opt/herd/herd"]
CMD ["serve"]
