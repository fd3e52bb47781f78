# herd container image: the `herd` binary, the llama.cpp runner and its backend modules.
# Build: docker build -t herd .      Run: docker run -p 11434:11434 -v ollama:/root/.ollama herd
FROM rust:1-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      cmake ninja-build ccache libclang-dev pkg-config unzip python3-pip \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# HERD_GPU=cuda selects the CUDA backend module (needs a CUDA toolkit base image instead).
ARG HERD_GPU=cpu
ENV HERD_GPU=${HERD_GPU} HERD_CACHE=/cache
RUN --mount=type=cache,target=/cache --mount=type=cache,target=/src/target \
    cargo build --release --workspace --bins \
 && mkdir -p /out/lib/herd \
 && cp target/release/herd /out/ \
 && cp target/release/runner-llamacpp target/release/*.so* /out/lib/herd/ 2>/dev/null || true

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libgomp1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/herd /usr/bin/herd
COPY --from=build /out/lib/herd /usr/lib/herd
ENV OLLAMA_HOST=0.0.0.0:11434 HERD_RUNNER=/usr/lib/herd/runner-llamacpp
EXPOSE 11434
ENTRYPOINT ["/usr/bin/herd"]
CMD ["serve"]
