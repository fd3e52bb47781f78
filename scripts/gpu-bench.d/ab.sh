# shellcheck shell=bash
# Sourced by scripts/gpu-bench: a short A/B of two runner-llamacpp builds on the GPU with the real
# SmolLM2 (the tests' GGUF), without the 8B model's build and import (~10 min). For a change whose
# effect the default pipeline showed: the same phases run against runner A (before) and B (after)
# in one device run, through `herd serve` as everywhere else.
#
# Dev box (`gpu-bench ab-prepare RUNNER_A RUNNER_B DEVBIN_DIR`): .gpu-ab/part1 = herd, both
# runners, their libraries and the device-built libggml-cuda.so (from an earlier run's returned
# devbin parts, DEVBIN_DIR), xz each; part2, part3 = the GGUF in two halves (one call's carry each).
# Device: `gpu-bench ab-part 1`, `ab-part 2`, `ab-part 3 WAIT`: each stages its part into
# $W/ab-in; the last starts ab_run detached once all parts check, and waits like `device`.
#
# Labels: ab-A-x16 / ab-B-x16 (gen, fmt; with --step-stats), ab-A-x1 / ab-B-x1 (gen, rcopy),
# ab-B-x1-ngram (rcopy with --draft-ngram), ab-B-x1-passive (gen with OMP_WAIT_POLICY=PASSIVE),
# ab-B-x1-t1 (gen with llama.cpp on one CPU thread: no OpenMP team spinning beside the GPU),
# ab-B-x1-nograph / ab-B-x1-ngram-nograph (GGML_CUDA_DISABLE_GRAPHS=1), ab-B-x1-ngram16 (16-token
# n-gram drafts). AB_RUNNERS (default "A B"): the runners of the x1/x16 phases.

# ab_pack ROOT RUNNER_A RUNNER_B DEVBIN_DIR GGUF
ab_pack() {
  local root=$1 ra=$2 rb=$3 devbin=$4 gguf=$5 tgt=$1/target/release out=$1/.gpu-ab
  rm -rf "$out" && mkdir -p "$out/part1" "$out/stage/bin"
  cp "$tgt/herd" "$out/stage/bin/herd" && strip "$out/stage/bin/herd"
  cp "$ra" "$out/stage/bin/runner-A" && cp "$rb" "$out/stage/bin/runner-B"
  strip "$out/stage/bin/runner-A" "$out/stage/bin/runner-B"
  local l; for l in libllama.so.0 libggml.so.0 libggml-base.so.0 libmtmd.so.0 libggml-cpu.so libggml-rpc.so; do
    cp -L "$tgt/$l" "$out/stage/bin/"
  done
  cat "$devbin"/devbin.part.* | xz -d | tar x -C "$out/stage/bin" ./libggml-cuda.so
  tar cf - -C "$out/stage" bin | xz -T0 -6 > "$out/part1/bin.tar.xz"
  rm -rf "$out/stage"
  split -n 2 -d -a 1 "$gguf" "$out/smol.gguf."
  mkdir -p "$out/part2" "$out/part3"
  mv "$out/smol.gguf.0" "$out/part2/" && mv "$out/smol.gguf.1" "$out/part3/"
  (cd "$out" && sha256sum part1/bin.tar.xz part2/smol.gguf.0 part3/smol.gguf.1 | sed 's| part[123]/| |' > SHA256SUMS)
  local p; for p in part1 part2 part3; do cp "$out/SHA256SUMS" "$out/$p/"; done
  rm "$out/SHA256SUMS"
  du -sh "$out"/part*
}

# ab_run: the device side, detached (writes $W/done like the pipeline).
ab_run() {
  T0=$(cat "$W/started")
  cd "$W" && mkdir -p logs ab
  trap 'touch "$W/done"' EXIT
  xz -dc ab-in/bin.tar.xz | tar x -C ab
  cat ab-in/smol.gguf.[0-9] > ab/smol.gguf
  export HB_D="$W/gpu-bench.d" HB_HERD="$W/ab/bin/herd" HB_MODELS="$W/models-ab" HB_RESULTS="$W/results.jsonl" \
    HB_LOG="$W/logs/herd.log" HB_PORT=11434 HB_R=2 HB_PROBES=3 HB_NP=${AB_NP:-256} HB_CONC=${AB_CONC:-16} HB_CTX1=8192 \
    HB_CTX16=4096 HB_COPY_WORDS=${AB_COPY_WORDS:-300} HB_COPY_NP=${AB_NP:-256} HB_FF_NP=320 HB_NGRAM=8 HB_TIMEOUT=60 HB_WRAP_DIR="$W/ab/bin"
  # shellcheck source=herd.sh
  source "$HB_D/herd.sh"
  : > "$HB_RESULTS"
  hb_stamp "host: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
  local r w
  for r in ${AB_RUNNERS:-A B}; do
    export HB_RUNNER="$W/ab/bin/runner-$r"
    hb_serve 1 "$HB_CTX1" "$HB_RUNNER" || return 1
    if [ ! -e "$W/ab/created" ]; then
      printf 'FROM %s\n' "$W/ab/smol.gguf" > "$W/ab/Modelfile"
      OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create bench -f "$W/ab/Modelfile" > logs/create.log 2>&1 \
        || { hb_stamp "create failed: $(tail -2 logs/create.log)"; return 1; }
      touch "$W/ab/created"
    fi
    hb_stamp "runner $r x1"
    hb_client "ab-$r-x1" 1 --num-ctx "$HB_CTX1" gen:"$HB_R" rcopy:"$HB_R"
    hb_stamp "runner $r x16"
    w=$(hb_wrapper "stats-$r" --step-stats 128) || w=$HB_RUNNER
    hb_serve "$HB_CONC" "$HB_CTX16" "$w" && hb_client "ab-$r-x16" "$HB_CONC" --num-ctx "$HB_CTX16" gen:"$HB_R" fmt:3
  done
  hb_stamp "runner B x1 n-gram, PASSIVE"
  if w=$(hb_wrapper ngram --draft-ngram "$HB_NGRAM") && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client ab-B-x1-ngram 1 --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  fi
  if w=$(hb_wrapper passive OMP_WAIT_POLICY=PASSIVE) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client ab-B-x1-passive 1 --num-ctx "$HB_CTX1" gen:"$HB_R"
  fi
  if w=$(hb_wrapper t1 --threads 1) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client ab-B-x1-t1 1 --num-ctx "$HB_CTX1" gen:"$HB_R"
  fi
  # Drafted steps change the batch's token count from step to step; llama.cpp's CUDA backend
  # re-captures its CUDA graph whenever the graph changes. Without graphs at all, and with
  # longer n-gram drafts:
  if w=$(hb_wrapper nograph GGML_CUDA_DISABLE_GRAPHS=1) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client ab-B-x1-nograph 1 --num-ctx "$HB_CTX1" gen:"$HB_R" rcopy:"$HB_R"
  fi
  if w=$(hb_wrapper ngram-nograph GGML_CUDA_DISABLE_GRAPHS=1 --draft-ngram "$HB_NGRAM") && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client ab-B-x1-ngram-nograph 1 --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  fi
  if w=$(hb_wrapper ngram16 --draft-ngram 16 --step-stats 32) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client ab-B-x1-ngram16 1 --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  fi
  hb_stop
  python3 "$HB_D/summarize.py" "$HB_RESULTS" --json "$W/summary.json" --conc "$HB_CONC" --herd-log "$HB_LOG" \
    > "$W/summary.txt" || hb_stamp "summarize failed"
  hb_stamp "ab done"
}
