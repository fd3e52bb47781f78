# shellcheck shell=bash
# Sourced by scripts/gpu-bench: the phases that measure through `herd serve`'s HTTP API (device
# pipeline and the CPU `smoke` mode share them; only the counts differ). Every number lands as
# JSON lines in $HB_RESULTS (herd_client.py); summarize.py makes summary.json from them.
#
# In: HB_D (this folder), HB_HERD (herd binary), HB_RUNNER (the real runner-llamacpp; its folder
# holds the backend .so files it loads), HB_MODELS (OLLAMA_MODELS), HB_RESULTS, HB_LOG (herd
# serve's log), HB_PORT; counts HB_R (rounds), HB_PROBES, HB_NP (tokens per request), HB_CONC
# (the "x16" stream count), HB_CTX1 / HB_CTX16 (num_ctx per slot, = OLLAMA_CONTEXT_LENGTH so
# /v1 requests do not reload), HB_PROMPT_WORDS (123: ~512 tokens), HB_THREADS (CPU: num_thread
# in the Modelfile, -t for llama-server; unset on the GPU), HB_COPY_WORDS, HB_COPY_NP, HB_FF_NP, HB_NGRAM (draft tokens).
#
# Switches that other branches add (runner flags --draft-ngram N, --no-grammar-ff) reach the
# runner through a wrapper used as HERD_RUNNER: herd clears the runner's environment, so the
# wrapper has the flags written in, and it `exec`s, so the runner keeps the pid herd started
# (nvidia-smi attributes memory to it) and /proc/self/exe stays the real binary (backends load
# from its folder). A flag the runner does not know is detected (`--help` fails) and the phase
# is recorded as n/a instead of run.

HB_PID=
HB_URL() { echo "http://127.0.0.1:$HB_PORT"; }
hb_stamp() { echo "[$(date -u +%H:%M:%S) +$(( $(date +%s) - ${T0:-$(date +%s)} ))s] $*"; }

# hb_na LABEL PHASE REASON: a phase that could not run, for the summary.
hb_na() {
  python3 -c 'import json,sys; print(json.dumps(dict(label=sys.argv[1], phase=sys.argv[2], status="n/a", reason=sys.argv[3])))' \
    "$1" "$2" "$3" >> "$HB_RESULTS"
  hb_stamp "$1 $2: n/a ($3)"
}

hb_wait_http() { # URL SECONDS PID: until URL answers 200 (or the process dies)
  local t=$(( $(date +%s) + $2 ))
  while [ "$(date +%s)" -lt "$t" ]; do
    python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || return 1
    sleep 0.3
  done
  return 1
}

# hb_serve PARALLEL CTX RUNNER: (re)start herd serve with the research note's settings (on the
# store HB_MODELS; HB_MLX_RUNNER, when set, is the runner for safetensors models).
hb_serve() {
  hb_stop
  ${HB_NICE:+nice -n "$HB_NICE"} env OLLAMA_HOST="127.0.0.1:$HB_PORT" OLLAMA_MODELS="$HB_MODELS" OLLAMA_FLASH_ATTENTION=1 \
    OLLAMA_KEEP_ALIVE=1h OLLAMA_NUM_PARALLEL="$1" OLLAMA_CONTEXT_LENGTH="$2" HERD_RUNNER="$3" \
    OLLAMA_NOPRUNE=1 ${HB_MLX_RUNNER:+HERD_MLX_RUNNER="$HB_MLX_RUNNER"} "$HB_HERD" serve >> "$HB_LOG" 2>&1 < /dev/null &
  HB_PID=$!
  echo "== herd serve parallel=$1 ctx=$2 runner=$3 pid=$HB_PID" >> "$HB_LOG"
  hb_wait_http "$(HB_URL)/api/version" 60 "$HB_PID" || { hb_stamp "herd serve did not start"; return 1; }
}

hb_stop() {
  if [ -n "$HB_PID" ]; then
    kill "$HB_PID" 2>/dev/null || true
    wait "$HB_PID" 2>/dev/null || true
    HB_PID=
  fi
}

# hb_wrapper TAG [VAR=VALUE...] FLAGS...: prints the path of a wrapper of $HB_RUNNER (set it to
# another runner, e.g. runner-mlx, for one call) adding FLAGS to serve runs (not to subcommands
# such as `quantize`) with the VARs in its environment, or fails when the runner does not accept
# FLAGS.
hb_wrapper() {
  local tag=$1; shift
  local envs=()
  while [ $# -gt 0 ] && [[ $1 =~ ^[A-Z_][A-Z0-9_]*= ]]; do envs+=("$1"); shift; done
  "$HB_RUNNER" "$@" --help > /dev/null 2>&1 || return 1
  local w; w="${HB_WRAP_DIR:-$(dirname "$HB_RUNNER")}/$(basename "$HB_RUNNER")-$tag"
  { echo '#!/bin/sh'
    local e; for e in "${envs[@]}"; do echo "export $e"; done
    # herd always passes --threads: a --threads among FLAGS replaces it (clap refuses two).
    if [[ " $* " == *" --threads "* ]]; then
      echo 'case "$1" in -*) skip=; for a do shift; [ -n "$skip" ] && { skip=; continue; }'
      echo '  [ "$a" = --threads ] && { skip=1; continue; }; set -- "$@" "$a"; done ;; esac'
    fi
    echo "case \"\$1\" in -*) exec '$HB_RUNNER' \"\$@\" $* ;; esac"
    echo "exec '$HB_RUNNER' \"\$@\""; } > "$w"
  chmod +x "$w"
  echo "$w"
}

hb_client() { # LABEL CONC ARGS... (PHASE:ROUNDS items among ARGS)
  local label=$1 conc=$2; shift 2
  python3 "$HB_D/herd_client.py" --url "$(HB_URL)" --label "$label" --conc "$conc" \
    --out "$HB_RESULTS" --num-predict "$HB_NP" --prompt-words "${HB_PROMPT_WORDS:-123}" --herd-pid "${HB_PID:-0}" --mark "$HB_LOG" \
    --copy-words "$HB_COPY_WORDS" --copy-predict "$HB_COPY_NP" --ff-predict "$HB_FF_NP" "$@" \
    || hb_stamp "client $label failed rc=$?"
}

# hb_import SOURCE QUANT: `herd create bench [-q QUANT]` from a GGUF, with a Llama-3-style
# TEMPLATE (the random model has none; HB_TEMPLATE=0 keeps the source's), then `bench-sd`: the same
# model with DRAFT = bench's own weights blob (self-draft). Writes HB_BLOB, HB_SD (1 when bench-sd
# exists), HB_SD_WHY to $HB_IMPORT_ENV (source it).
hb_import() {
  local src=$1 quant=$2 dir; dir=$(mktemp -d)
  { echo "FROM $src"
    if [ "${HB_TEMPLATE:-1}" = 1 ]; then
      printf '%s\n' 'TEMPLATE """{{ if .System }}<|start_header_id|>system<|end_header_id|>' '' \
        '{{ .System }}<|eot_id|>{{ end }}<|start_header_id|>user<|end_header_id|>' '' \
        '{{ .Prompt }}<|eot_id|><|start_header_id|>assistant<|end_header_id|>' '' '"""'
      echo 'PARAMETER stop <|eot_id|>'
    fi
    echo 'PARAMETER top_k 40'; echo 'PARAMETER min_p 0.05'
    [ -z "${HB_THREADS:-}" ] || echo "PARAMETER num_thread $HB_THREADS"; } > "$dir/Modelfile"
  local q=(); [ -n "$quant" ] && q=(-q "$quant")
  OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create bench "${q[@]}" -f "$dir/Modelfile" > "$dir/create.log" 2>&1 \
    || { tail -5 "$dir/create.log"; return 1; }
  HB_BLOB=$(python3 - "$HB_MODELS" <<'EOF'
import json, sys
m = json.load(open(f"{sys.argv[1]}/manifests/registry.ollama.ai/library/bench/latest"))
d = next(l["digest"] for l in m["layers"] if l["mediaType"] == "application/vnd.ollama.image.model")
print(f"{sys.argv[1]}/blobs/{d.replace(':', '-')}")
EOF
)
  printf 'FROM bench\nDRAFT %s\n' "$HB_BLOB" > "$dir/Modelfile.sd"
  if OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create bench-sd -f "$dir/Modelfile.sd" > "$dir/create-sd.log" 2>&1; then
    HB_SD=1 HB_SD_WHY=
  else
    HB_SD=0; HB_SD_WHY=$(tail -1 "$dir/create-sd.log")
  fi
  rm -rf "$dir"
  # The pipeline imports in a background subshell: the outcome travels through this file.
  printf 'HB_BLOB=%q\nHB_SD=%q\nHB_SD_WHY=%q\n' "$HB_BLOB" "$HB_SD" "$HB_SD_WHY" > "$HB_IMPORT_ENV"
}

# hb_prune STORE: delete the blobs no manifest of STORE names (the uploaded source files a
# create leaves; OLLAMA_NOPRUNE keeps herd from it). Only while no create runs on STORE.
hb_prune() {
  python3 - "$1" <<'EOF'
import json, os, sys
store = sys.argv[1]; keep = set()
for d, _, fs in os.walk(os.path.join(store, "manifests")):
    for f in fs:
        m = json.load(open(os.path.join(d, f)))
        keep.update(l["digest"].replace(":", "-") for l in m.get("layers", []) + [m.get("config", {})] if "digest" in l)
freed = 0
for b in os.listdir(os.path.join(store, "blobs")):
    p = os.path.join(store, "blobs", b)
    if b.startswith("sha256-") and b not in keep and os.path.isfile(p):
        freed += os.path.getsize(p); os.remove(p)
print(f"pruned {freed} bytes of unreferenced blobs from {store}")
EOF
}

# llama-server on the same blob, the same prompts (client kind "server"), x1 and x16.
hb_llama_server() { # SERVER_BIN
  local L=("$1" -m "$HB_BLOB" -fa on --cache-ram 0 --host 127.0.0.1 --port "$HB_SPORT" --no-webui ${HB_NGL:+-ngl "$HB_NGL"} ${HB_THREADS:+-t "$HB_THREADS"})
  local n pid
  for n in 1 "$HB_CONC"; do
    local ctx=$HB_CTX1; [ "$n" = 1 ] || ctx=$(( HB_CTX16 * n ))
    local label=server-x16; [ "$n" = 1 ] && label=server-x1
    # Its shared libraries lie beside it (scripts/llama-server's cache and the device build/bin).
    LD_LIBRARY_PATH="$(dirname "$1")" "${L[@]}" -np "$n" -c "$ctx" > "$HB_SLOG.x$n" 2>&1 < /dev/null &
    pid=$!
    if hb_wait_http "http://127.0.0.1:$HB_SPORT/health" 120 "$pid"; then
      local ph=(gen:"$HB_R"); [ "$n" = 1 ] && ph+=(probe:"$HB_PROBES")
      python3 "$HB_D/herd_client.py" --kind server --url "http://127.0.0.1:$HB_SPORT" --label "$label" \
        --conc "$n" --out "$HB_RESULTS" --num-predict "$HB_NP" --prompt-words "${HB_PROMPT_WORDS:-123}" "${ph[@]}" || hb_stamp "server x$n client failed"
      if [ "$n" != 1 ] && command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits \
          | sed "s/^/$label smi: /" >> "$HB_SLOG.x$n" || true
      fi
    else
      hb_na "$label" gen "llama-server did not start: $(tail -1 "$HB_SLOG.x$n")"
    fi
    kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  done
}

# HB_X16_AB=1 instead of the herd phases: only where constrained x16 loses, in the least device
# time: free and JSON-schema rounds at x16 with the default runner and without step padding
# (plan::padding), each with step stats (shape changes) and mask waits.
hb_x16_ab() {
  local w tag label flags
  for tag in default nopad; do
    case $tag in
      default) flags=(--step-stats 128); label=herd-x16 ;;
      nopad) flags=(--step-padding off --step-stats 128); label=herd-x16-nopad ;;
    esac
    hb_stamp "herd x$HB_CONC $tag"
    if w=$(hb_wrapper "ab$tag" "${flags[@]}") && hb_serve "$HB_CONC" "$HB_CTX16" "$w"; then
      hb_client "$label" "$HB_CONC" --num-ctx "$HB_CTX16" gen:"$HB_R" fmt:"$HB_R"
    fi
  done
  hb_stop
}

# hb_ab16 LABEL TAG PHASES FLAGS...: x16 rounds PHASES ("gen:2 fmt:2") through a wrapper of the
# runner adding FLAGS (VAR=VALUE first, as hb_wrapper takes them) and step stats; n/a when the
# runner does not take FLAGS.
hb_ab16() {
  local label=$1 tag=$2 phases=$3 w; shift 3
  hb_stamp "herd x$HB_CONC $*"
  if w=$(hb_wrapper "$tag" "$@" --step-stats 128) && hb_serve "$HB_CONC" "$HB_CTX16" "$w"; then
    # shellcheck disable=SC2086 # PHASES is a list of words
    hb_client "$label" "$HB_CONC" --num-ctx "$HB_CTX16" $phases
  else
    hb_na "$label" fmt "runner has no $*"
  fi
}

# The herd phases. Order: x1 free/format/copy/ff, the switches at x1, then x16.
hb_herd() {
  local w
  if [ "${HB_X16_AB:-0}" = 1 ]; then hb_x16_ab; return; fi
  hb_stamp "herd x1"
  # With step stats as at x16 (run K: sampled x1 at 235 t/s against 243 greedy, not the
  # sampler's 10 µs a token).
  local r1; r1=$(hb_wrapper stats1 --step-stats 128) || r1=$HB_RUNNER
  if hb_serve 1 "$HB_CTX1" "$r1"; then
    hb_client herd-x1 1 --num-ctx "$HB_CTX1" gen:"$HB_R" probe:"$HB_PROBES" rprobe:"$HB_PROBES" chat:1 fmt:"$HB_R" ff20:2 copy:2 mem
  fi
  # Host sampling of the whole row is the runner's default; A/B (run T: level with it at one
  # stream on an H100; run G: +1.5 % on an H200): device top-k with one slot (auto).
  if [ "${HB_OLD_AB:-0}" = 1 ]; then
  hb_stamp "herd x1 device sampling"
  if w=$(hb_wrapper devsamp --device-sampling auto --step-stats 128) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client herd-x1-devsamp 1 --num-ctx "$HB_CTX1" gen:"$HB_R"
  fi
  fi
  # The A/Bs run K and J settled (OMP_WAIT_POLICY=PASSIVE, --threads 4, the first-token hold;
  # native/gpu-results.md) run again only with HB_OLD_AB=1: they cost ~3 min of device time.
  if [ "${HB_OLD_AB:-0}" = 1 ]; then
  hb_stamp "herd x1 OMP_WAIT_POLICY=PASSIVE"
  if w=$(hb_wrapper passive OMP_WAIT_POLICY=PASSIVE) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client herd-x1-passive 1 --num-ctx "$HB_CTX1" gen:"$HB_R" fmt:2
  fi
  fi
  hb_stamp "grammar fast-forward off (x1)"
  if w=$(hb_wrapper noff --no-grammar-ff) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client herd-x1-ffoff 1 --num-ctx "$HB_CTX1" ff20:2
  else
    hb_na herd-x1-ffoff ff20 "runner has no --no-grammar-ff"
  fi
  hb_stamp "n-gram drafter (x1)"
  if w=$(hb_wrapper ngram --draft-ngram "$HB_NGRAM") && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client herd-x1-ngram 1 --num-ctx "$HB_CTX1" copy:2 gen:1
  else
    hb_na herd-x1-ngram copy "runner has no --draft-ngram"
  fi
  hb_stamp "self-draft (x1)"
  if [ "$HB_SD" = 1 ] && hb_serve 1 "$HB_CTX1" "$HB_RUNNER"; then
    hb_client herd-x1-sd 1 --model bench-sd --num-ctx "$HB_CTX1" gen:2 copy:1
  else
    hb_na herd-x1-sd gen "bench-sd not created: ${HB_SD_WHY:-}"
  fi
  hb_stamp "herd x$HB_CONC"
  # With the runner's per-phase step times (`--step-stats`; a few clock reads a step), which
  # summarize.py --herd-log sets beside each client phase: where constrained x16 loses.
  local r16; r16=$(hb_wrapper stats --step-stats 128) || r16=$HB_RUNNER
  if hb_serve "$HB_CONC" "$HB_CTX16" "$r16"; then
    hb_client "herd-x16" "$HB_CONC" --num-ctx "$HB_CTX16" gen:"$HB_R" chat:1 fmt:"$HB_R" mem
    hb_stamp "herd x$HB_CONC num_batch 2048"
    hb_client "herd-x16-nb2048" "$HB_CONC" --num-ctx "$HB_CTX16" --num-batch 2048 gen:2 mem
  fi
  # A/B of the GPU step policy: the same runner with first-token holding off (plan::mixed).
  if [ "${HB_OLD_AB:-0}" = 1 ]; then
  hb_stamp "herd x$HB_CONC without first-token hold"
  if w=$(hb_wrapper nohold --no-first-token-hold) && hb_serve "$HB_CONC" "$HB_CTX16" "$w"; then
    hb_client "herd-x16-nohold" "$HB_CONC" --num-ctx "$HB_CTX16" gen:2 fmt:2
  else
    hb_na herd-x16-nohold gen "runner has no --no-first-token-hold"
  fi
  fi
  # Settled A/Bs (HB_OLD_AB=1 only; ~80 s of device time): runs V and W (H100) found no gain in
  # --mask-after-launch (constrained ÷ free 1.003 against 0.982, the same absolute rates) and a
  # loss in --threads 1 (x16 0.913 against 0.930); fast-forward and step padding were settled
  # by runs J and S-T.
  if [ "${HB_OLD_AB:-0}" = 1 ]; then
  # A/B of grammar fast-forward under concurrency: run J's constrained x16 (0.76 of free) had
  # every forced token drafted with a full logits row; forced runs carry no rows now.
  hb_ab16 herd-x16-ffoff noff16 "gen:1 fmt:2" --no-grammar-ff
  # CPU threads on a GPU (run J: constrained x16 at 0.76 of free, x1 at 1.00): llama.cpp's
  # OpenMP threads (one per core) spin after each CPU graph part (the embedding rows) while the
  # GPU computes, which is when the 16 grammar-mask threads need the cores. A/B: the threads
  # sleeping at once (OMP_WAIT_POLICY=PASSIVE), and 4 threads instead of one per core.
  hb_stamp "herd x$HB_CONC OMP_WAIT_POLICY=PASSIVE"
  if w=$(hb_wrapper passive OMP_WAIT_POLICY=PASSIVE --step-stats 128) && hb_serve "$HB_CONC" "$HB_CTX16" "$w"; then
    hb_client "herd-x16-passive" "$HB_CONC" --num-ctx "$HB_CTX16" gen:2 fmt:2
  fi
  hb_stamp "herd x$HB_CONC --threads 4"
  if w=$(hb_wrapper t4 --threads 4 --step-stats 128) && hb_serve "$HB_CONC" "$HB_CTX16" "$w"; then
    hb_client "herd-x16-t4" "$HB_CONC" --num-ctx "$HB_CTX16" gen:2 fmt:2
  fi
  # Step padding (plan::padding) is the runner's GPU default; A/B: steps that shrink as streams
  # end, each new shape a graph rebuild and CUDA graph capture (6-9 ms on the 8B, runs O-Q).
  hb_ab16 herd-x16-nopad nopad "gen:2 fmt:2" --step-padding off
  # llama.cpp's CPU threads on a GPU only look up each step's embedding rows, yet every step
  # wakes them and meets them at a barrier, while the sampling pool and the grammar workers
  # want the same cores. A/B: one llama.cpp thread, the sampling pool kept at one per core.
  hb_ab16 herd-x16-t1 t1 "gen:2 fmt:2" --threads 1 --sample-threads "$(nproc)"
  # The grammar workers' masks compete for the cores while the engine samples, builds and
  # launches a step (run U: constrained x16 launched 0.2-0.4 ms slower than free at the same
  # shape). A/B: masks wait for the step's launch (runner-core grammar::gate).
  hb_ab16 herd-x16-mal mal "gen:2 fmt:2" --mask-after-launch
  fi
  # The sampling pool's threads are woken shortly before a decode step's logits land, from the
  # last decode step's wait (engine::prewake; the GPU default since run V, H100: 0.835 -> 0.938
  # of batched-bench B=16). A/B: woken when the rows land.
  hb_ab16 herd-x16-nopw nopw "gen:2 fmt:2" --prewake off
  # Settled A/Bs asked for again by name (HB_AB16="nomal t1"), without the rest of HB_OLD_AB;
  # nomal: grammar commits and masks not held for the launch (the GPU default since run Z).
  if [ "${HB_OLD_AB:-0}" != 1 ]; then
    for t in ${HB_AB16:-}; do
      case $t in
        mal) hb_ab16 herd-x16-mal mal "gen:2 fmt:2" --mask-after-launch ;;
        nomal) hb_ab16 herd-x16-nomal nomal "gen:2 fmt:2" --mask-after-launch off ;;
        t1) hb_ab16 herd-x16-t1 t1 "gen:2 fmt:2" --threads 1 --sample-threads "$(nproc)" ;;
        nopad) hb_ab16 herd-x16-nopad nopad "gen:2 fmt:2" --step-padding off ;;
        *) hb_na "herd-x16-$t" fmt "unknown HB_AB16 tag $t" ;;
      esac
    done
  fi
  if [ "${HB_OLD_AB:-0}" = 1 ]; then
  hb_stamp "herd x1 --threads 1"
  if w=$(hb_wrapper t1x1 --threads 1 --step-stats 128) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client "herd-x1-t1" 1 --num-ctx "$HB_CTX1" gen:"$HB_R"
  fi
  fi
  # One CUDA graph per token count (patch 0005) is the runner's default since run O; A/B (run O
  # and P settled it, HB_OLD_AB=1 only): one graph for all counts, whose warm-up every change
  # of count resets.
  if [ "${HB_OLD_AB:-0}" = 1 ]; then
  hb_stamp "herd x$HB_CONC one CUDA graph"
  if w=$(hb_wrapper onegraph --no-graph-per-shape --step-stats 128) && hb_serve "$HB_CONC" "$HB_CTX16" "$w"; then
    hb_client "herd-x16-onegraph" "$HB_CONC" --num-ctx "$HB_CTX16" gen:2 fmt:2
  fi
  fi
  hb_stamp "self-draft (x$HB_CONC)"
  if [ "$HB_SD" = 1 ] && hb_serve "$HB_CONC" "$HB_CTX16" "$HB_RUNNER"; then
    hb_client herd-x16-sd "$HB_CONC" --model bench-sd --num-ctx "$HB_CTX16" gen:2
  else
    hb_na herd-x16-sd gen "bench-sd not created: ${HB_SD_WHY:-}"
  fi
  hb_stop
  hb_stamp "herd phases done"
}

# hb_real DIR: the copy task on a real model (phase "real"). Random weights do not copy, so the
# n-gram drafter's speedup on the device needs real ones: SmolLM2 (the tests' GGUF, 98 MB) comes
# from the dev box in two parts (`gpu-bench real-part 1|2`, one call's carry each) into DIR with
# a SHA256SUMS; waits HB_REAL_WAIT s for them. Labels real-x1, real-x1-ngram (copy, greedy).
hb_real() {
  local dir=$1 t=$(( $(date +%s) + ${HB_REAL_WAIT:-60} )) w
  until (cd "$dir" 2>/dev/null && sha256sum -c --quiet SHA256SUMS > /dev/null 2>&1); do
    [ "$(date +%s)" -lt "$t" ] || { hb_na real-x1 rcopy "the real model's parts were not staged: $(ls "$dir" 2>&1 | tr '\n' ' ')"; return 1; }
    sleep 5
  done
  local m; m="$(dirname "$dir")/smol.gguf"
  cat "$dir"/smol.gguf.[0-9] > "$m"
  hb_serve 1 "$HB_CTX1" "$HB_RUNNER" || return 1
  printf 'FROM %s\n' "$m" > "$dir/Modelfile"
  [ -z "${HB_THREADS:-}" ] || echo "PARAMETER num_thread $HB_THREADS" >> "$dir/Modelfile"
  OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create smol -f "$dir/Modelfile" > "$dir/create.log" 2>&1 \
    || { hb_na real-x1 rcopy "herd create smol: $(tail -1 "$dir/create.log")"; return 1; }
  hb_client real-x1 1 --model smol --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  if w=$(hb_wrapper ngram --draft-ngram "$HB_NGRAM") && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client real-x1-ngram 1 --model smol --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  else
    hb_na real-x1-ngram rcopy "runner has no --draft-ngram"
  fi
  # 16-token drafts, then with one CUDA graph for all token counts (the runner's default is one
  # per count since run O): drafted steps change the count, which resets one graph's warm-up.
  if w=$(hb_wrapper ngram16 --draft-ngram 16 --step-stats 64) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client real-x1-ngram16 1 --model smol --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  fi
  if [ "${HB_OLD_AB:-0}" = 1 ] && w=$(hb_wrapper ngram16og --no-graph-per-shape --draft-ngram 16 --step-stats 64) && hb_serve 1 "$HB_CTX1" "$w"; then
    hb_client real-x1-ngram16-onegraph 1 --model smol --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  fi
  # Self-draft on the real model: SmolLM2 drafting for itself (the Modelfile's DRAFT layer). The
  # random 8B's self-draft (bench-sd) drafts nothing, since no token of a random model reaches
  # the draft model's confidence bar (draft_model.rs P_MIN); this one shows acceptance and the
  # verify loop's cost, x1 and x16, on the copy task (greedy) and sampled text (gen).
  printf 'FROM smol\nDRAFT %s\n' "$m" > "$dir/Modelfile.sd"
  if hb_serve 1 "$HB_CTX1" "$HB_RUNNER" && OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create smol-sd -f "$dir/Modelfile.sd" > "$dir/create-sd.log" 2>&1; then
    hb_client real-x1-sd 1 --model smol-sd --num-ctx "$HB_CTX1" rcopy:"$HB_R" gen:2
    hb_client real-x1 1 --model smol --num-ctx "$HB_CTX1" gen:2
    if hb_serve "$HB_CONC" "$HB_CTX16" "$HB_RUNNER"; then
      hb_client real-x16 "$HB_CONC" --model smol --num-ctx "$HB_CTX16" rcopy:1 gen:1
      hb_client real-x16-sd "$HB_CONC" --model smol-sd --num-ctx "$HB_CTX16" rcopy:1 gen:1
    fi
  else
    hb_na real-x1-sd rcopy "herd create smol-sd: $(tail -1 "$dir/create-sd.log")"
  fi
  hb_stop
}

# real_pack GGUF OUT: OUT/part1 and OUT/part2 for hb_real (dev box).
real_pack() {
  rm -rf "$2" && mkdir -p "$2/part1" "$2/part2"
  split -n 2 -d -a 1 "$1" "$2/smol.gguf."
  mv "$2/smol.gguf.0" "$2/part1/" && mv "$2/smol.gguf.1" "$2/part2/"
  (cd "$2" && sha256sum part1/smol.gguf.0 part2/smol.gguf.1 | sed 's| part[12]/| |' > SHA256SUMS)
  cp "$2/SHA256SUMS" "$2/part1/" && mv "$2/SHA256SUMS" "$2/part2/"
  du -sh "$2/part1" "$2/part2"
}
