# shellcheck shell=bash
# Sourced by scripts/gpu-bench (after herd.sh): the "mlx" phase. runner-mlx on the CUDA build of
# MLX (the pinned mlx-cuda-13 wheel's libmlx.so) serves the random Llama-3-8B-shaped model in
# bf16 and MLX int4 through `herd serve`, with herd_client.py's gen (x1, x16) and probe (x1)
# phases, so summarize.py can set them beside runner-llamacpp's Q4_K_M of the same weights.
#
# Dev box (`prepare`): mlx_pack fills .gpu-mlx/part1 and part2 (each one device call's carry):
#   the wheel's libmlx.so (stripped; .nv_fatbin kept), include/{cccl,cute,cutlass} (NVRTC's
#   headers for the JIT kernels, found at <libdir>/../include/…) and its bundled BLAS/LAPACK
#   dir as one tar.xz split in two, plus the
#   release runner-mlx (the same binary runs on either libmlx: the wheels' headers are identical;
#   mlx_pack checks that the CUDA libmlx defines every MLX symbol the binary needs).
# Device: mlx_stage N copies part N into $W/mlx-in (any time, before or after the pipeline
#   started); the phase waits for both parts, verifies SHA256SUMS and unpacks into $W/mlxrun in
#   the wheel's layout (runner-mlx, mlx/lib/libmlx.so, mlx/include/{cccl,cute,cutlass},
#   mlx_cuda_13.libs).
#   LD_LIBRARY_PATH puts that libmlx first (runner-mlx's RUNPATH is $ORIGIN/mlx/lib anyway) and
#   adds the CUDA libraries' folders when ldd misses one; CUDA_HOME (NVRTC's CUDA headers) and
#   LD_LIBRARY_PATH reach the runner through herd's environment allow-list.
# The model: mkmlx.py writes the checkpoint (the GGUF's weights, bf16) alongside the build; the
#   phase then runs `herd create bench-mlx-q4 --experimental -q int4` (runner-mlx quantizes on
#   the GPU) and `herd create bench-mlx --experimental` into a store of its own, $HB_MLX_MODELS.
#
# In (beside herd.sh's): W (work dir; logs in $W/logs), HB_MLX_BIN (runner-mlx), HB_MLX_MODELS
# (its store), HB_MLX_SRC (checkpoint dir), HB_MLX_IMPORT_ENV (written once both creates worked).

# mlx_pack_lib LOCK CACHE: prints the path of the packed library tree of the lock's CUDA wheel
# (fetched with pip into CACHE/dl when absent, sha256-checked), made once per wheel.
mlx_pack_lib() {
  local lock=$1 cache=$2
  local ver pkg arc sha; ver=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$lock")
  pkg=$(sed -n 's/^cuda_package = "\(.*\)"$/\1/p' "$lock"); arc=$(sed -n 's/^cuda_archive = "\(.*\)"$/\1/p' "$lock")
  sha=$(sed -n 's/^cuda_sha256 = "\(.*\)"$/\1/p' "$lock")
  local whl=$cache/dl/$arc
  if [ ! -f "$whl" ]; then
    mkdir -p "$cache/dl"
    python3 -m pip download -q --no-deps --only-binary=:all: "$pkg==$ver" -d "$cache/dl" >&2
  fi
  echo "$sha  $whl" | sha256sum -c --quiet || { echo "mlx_pack: $whl does not match native/mlx.lock" >&2; return 1; }
  # The packed library tree depends on the wheel alone: made once (xz -9 of ~150 MB takes minutes).
  # .v2: the include set grew (cute, cutlass); an older pack must not be reused.
  local packed=$cache/gpu-mlx/${arc%.whl}.v2.tar.xz
  if [ ! -s "$packed" ] || [ ! -s "$packed.syms" ]; then
    local tmp; tmp=$(mktemp -d)
    mkdir -p "$(dirname "$packed")"
    python3 -m zipfile -e "$whl" "$tmp/w"
    mkdir -p "$tmp/p/mlx/lib" "$tmp/p/mlx/include"
    cp "$tmp/w/mlx/lib/libmlx.so" "$tmp/p/mlx/lib/" && strip --strip-unneeded "$tmp/p/mlx/lib/libmlx.so"
    readelf -S -W "$tmp/p/mlx/lib/libmlx.so" | grep -q '\.nv_fatbin' || { echo "mlx_pack: strip lost .nv_fatbin" >&2; return 1; }
    # NVRTC's include path for MLX's JIT kernels: CCCL, and CUTLASS/cute for the quantized
    # (int4/int8) kernels (run J: without them every int4 step failed to compile).
    local inc; for inc in cccl cute cutlass; do cp -r "$tmp/w/mlx/include/$inc" "$tmp/p/mlx/include/"; done
    local d; for d in "$tmp"/w/*.libs; do [ -d "$d" ] && cp -r "$d" "$tmp/p/"; done
    nm -D --defined-only "$tmp/p/mlx/lib/libmlx.so" | awk '{print $3}' | LC_ALL=C sort -u > "$packed.syms.tmp"
    tar cf - -C "$tmp/p" . | xz -T0 -9 > "$packed.tmp"
    mv "$packed.tmp" "$packed" && mv "$packed.syms.tmp" "$packed.syms"
    rm -rf "$tmp"
  fi
  echo "$packed"
}

# mlx_pack ROOT CACHE: the two carry folders ROOT/.gpu-mlx/part{1,2} (prepare, dev box).
mlx_pack() {
  local root=$1 cache=$2 packed
  packed=$(mlx_pack_lib "$root/native/mlx.lock" "$cache") || return 1
  (cd "$root" && cargo build --release -p runner-mlx --bin runner-mlx)
  local bin=$root/target/release/runner-mlx missing
  missing=$(nm -D --undefined-only "$bin" | awk '{print $2}' | grep -E '^_ZNK?3mlx' | LC_ALL=C sort -u | LC_ALL=C comm -23 - "$packed.syms")
  [ -z "$missing" ] || { echo "mlx_pack: the CUDA libmlx lacks: $missing" >&2; return 1; }
  local out=$root/.gpu-mlx
  rm -rf "$out" && mkdir -p "$out/part1" "$out/part2"
  strip -o "$out/part2/runner-mlx" "$bin" && xz -9 "$out/part2/runner-mlx"
  split -n 2 -d -a 1 "$packed" "$out/mlx-cuda.tar.xz."
  mv "$out/mlx-cuda.tar.xz.0" "$out/part1/" && mv "$out/mlx-cuda.tar.xz.1" "$out/part2/"
  (cd "$out" && sha256sum part1/mlx-cuda.tar.xz.0 part2/mlx-cuda.tar.xz.1 part2/runner-mlx.xz \
    | sed 's| part[12]/| |' > SHA256SUMS)
  cp "$out/SHA256SUMS" "$out/part1/" && mv "$out/SHA256SUMS" "$out/part2/"
  du -sh "$out/part1" "$out/part2"
  local p; for p in part1 part2; do
    [ "$(du -sb "$out/$p" | cut -f1)" -lt $(( 56 << 20 )) ] || { echo "mlx_pack: $p over 56 MiB" >&2; return 1; }
  done
}

# mlx_stage DIR [DEST]: copy one part's files into DEST (default $W/mlx-in; device, `gpu-bench
# mlx-part N`, and `real-part N` for hb_real's parts).
mlx_stage() {
  local dest=${2:-$W/mlx-in}
  [ -d "$1" ] || { echo "no $1: run prepare here and carry it" >&2; return 1; }
  mkdir -p "$dest" && cp "$1"/* "$dest/"
  echo "staged $(ls "$1" | tr '\n' ' ')in $dest"
  (cd "$dest" && sha256sum -c --quiet SHA256SUMS > /dev/null 2>&1) && echo "parts: complete" \
    || echo "parts: waiting for the other part"
}

# mlx_unpack SECONDS: wait for both parts, verify, unpack into $W/mlxrun, set LD_LIBRARY_PATH.
mlx_unpack() {
  local t=$(( $(date +%s) + $1 ))
  until (cd "$W/mlx-in" 2>/dev/null && sha256sum -c --quiet SHA256SUMS > /dev/null 2>&1); do
    [ "$(date +%s)" -lt "$t" ] || { hb_stamp "mlx parts missing after $1 s: $(ls "$W/mlx-in" 2>&1 | tr '\n' ' ')"; return 1; }
    sleep 5
  done
  rm -rf "$W/mlxrun" && mkdir -p "$W/mlxrun"
  cat "$W"/mlx-in/mlx-cuda.tar.xz.[0-9] | xz -d | tar x -C "$W/mlxrun" || return 1
  xz -dc "$W/mlx-in/runner-mlx.xz" > "$W/mlxrun/runner-mlx" && chmod +x "$W/mlxrun/runner-mlx"
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export LD_LIBRARY_PATH="$W/mlxrun/mlx/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  ldd "$W/mlxrun/runner-mlx" "$W/mlxrun/mlx/lib/libmlx.so" > "$W/logs/ldd-mlx.txt" 2>&1 || true
  if grep -q 'not found' "$W/logs/ldd-mlx.txt"; then
    # The CUDA libraries outside the loader's cache: the toolkit's and the pip wheels' folders.
    local extra; extra=$(find "$CUDA_HOME/lib64" /usr/local/lib/python3*/dist-packages/nvidia /opt/*/.venv/lib/python3*/site-packages/nvidia \
      -maxdepth 2 -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
    hb_stamp "ldd missing: $(grep 'not found' "$W/logs/ldd-mlx.txt" | sort -u | tr '\n' ' '); adding ${extra%:}"
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:${extra%:}"
    ldd "$W/mlxrun/runner-mlx" "$W/mlxrun/mlx/lib/libmlx.so" > "$W/logs/ldd-mlx.txt" 2>&1 || true
  fi
  grep -q "libmlx.so => $W/mlxrun/mlx/lib/libmlx.so" "$W/logs/ldd-mlx.txt" \
    || { hb_stamp "runner-mlx does not resolve the staged libmlx: $(grep libmlx "$W/logs/ldd-mlx.txt")"; return 1; }
  local v; v=$("$W/mlxrun/runner-mlx" version 2>&1) || { hb_stamp "runner-mlx does not start: $v"; return 1; }
  hb_stamp "runner-mlx: $v; CUDA_HOME=$CUDA_HOME"
}

# mlx_mkmodel DIR RESERVE [ARGS]: mkmlx.py into DIR (niced; it overlaps the build), once the disk
# has room for it (16 GB) beside RESERVE bytes the GGUF import may still write; RESERVE drops to
# 0 once $W/import.freed exists. Skipped when the mlx models already exist (--rerun).
mlx_mkmodel() {
  local dir=$1 reserve=$2; shift 2
  [ -s "${HB_MLX_IMPORT_ENV:-/nonexistent}" ] && { echo "mlx models already imported"; return 0; }
  local need=${HB_MLX_DISK:-20000000000} t=$(( $(date +%s) + 1200 ))
  while :; do
    [ -e "$W/import.freed" ] && reserve=0
    local avail; avail=$(df -B1 --output=avail "$(dirname "$dir")" | tail -1)
    [ "$avail" -ge $(( need + reserve )) ] && break
    [ "$(date +%s)" -lt "$t" ] || { echo "no disk for mkmlx: $avail B free"; return 1; }
    sleep 5
  done
  echo "disk free $avail B (reserve $reserve B): writing $dir"
  nice -n 19 python3 "$HB_D/mkmlx.py" "$dir" "$@"
}

# hb_mlx_import SRC: the two creates from the checkpoint SRC against a running herd serve on
# $HB_MLX_MODELS; writes $HB_MLX_IMPORT_ENV. int4 first: after its upload the source file is
# replaced by a hard link to the uploaded blob (same bytes), so the bf16 create needs no second
# 16 GB; the source and the then unreferenced upload are deleted at the end.
hb_mlx_import() {
  local src=$1 dir rc=0; dir=$(mktemp -d)
  { echo "FROM $src"; echo 'PARAMETER top_k 40'; echo 'PARAMETER min_p 0.05'
    [ -z "${HB_THREADS:-}" ] || echo "PARAMETER num_thread $HB_THREADS"; } > "$dir/Modelfile"
  local c=(env OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create)
  local t0; t0=$(date +%s)
  "${c[@]}" bench-mlx-q4 --experimental -q int4 -f "$dir/Modelfile" > "$W/logs/create-mlx-q4.log" 2>&1 \
    || { hb_stamp "create bench-mlx-q4 failed: $(tail -2 "$W/logs/create-mlx-q4.log")"; rc=1; }
  local t1; t1=$(date +%s)
  local f=$src/model.safetensors blob
  blob=$(find "$HB_MLX_MODELS/blobs" -maxdepth 1 -type f -size "$(stat -c %s "$f")c" | head -1)
  [ -n "$blob" ] && cmp -s -n 1048576 "$blob" "$f" && ln -f "$blob" "$f"
  "${c[@]}" bench-mlx --experimental -f "$dir/Modelfile" > "$W/logs/create-mlx.log" 2>&1 \
    || { hb_stamp "create bench-mlx failed: $(tail -2 "$W/logs/create-mlx.log")"; rc=1; }
  hb_stamp "mlx creates: int4 $(( t1 - t0 )) s, bf16 $(( $(date +%s) - t1 )) s (rc=$rc)"
  rm -rf "$dir" "$src"
  hb_prune "$HB_MLX_MODELS"
  du -sh "$HB_MLX_MODELS/blobs"
  [ "$rc" = 0 ] && echo "ok" > "$HB_MLX_IMPORT_ENV"
  return "$rc"
}

# hb_mlx MKPID: the phase. Waits for mkmlx (MKPID, 0 = none), creates, then x1 and x16 for int4
# and bf16 (int4 first: the comparison with Q4_K_M), then both again computing in bfloat16.
# Labels mlx-int4-x1 ... mlx-bf16-x16, mlx-int4c-x1 ... mlx-bf16c-x16.
hb_mlx() {
  local mk=$1 HB_MODELS=$HB_MLX_MODELS HB_MLX_RUNNER=$HB_MLX_BIN
  # A first request may wait for the load (16 GB) and MLX's first NVRTC kernel compiles.
  local -x HB_TIMEOUT=${HB_MLX_TIMEOUT:-300}
  [ "$mk" = 0 ] || wait "$mk" || true
  if [ ! -s "$HB_MLX_IMPORT_ENV" ]; then
    grep -q '^wrote' "$W/logs/mkmlx.log" 2>/dev/null || { hb_na mlx-int4-x1 gen "mkmlx failed: $(tail -1 "$W/logs/mkmlx.log" 2>/dev/null)"; return 1; }
    hb_serve 1 "$HB_CTX1" "$HB_RUNNER" || return 1
    hb_mlx_import "$HB_MLX_SRC"
    hb_stop
  fi
  # HB_MLX_BUDGET bounds the serving part (device time): a configuration that would start after
  # it is recorded n/a, not run.
  local q m n t0 plain=$HB_MLX_RUNNER wrap; t0=$(date +%s)
  # int4c / bf16c: the same models computing in bfloat16 (runner-mlx --compute bf16; the
  # default computes in float32, so a bf16 checkpoint reads twice its bytes a step).
  wrap=$(HB_RUNNER=$HB_MLX_BIN hb_wrapper bf16 --compute bf16) || wrap=
  for q in int4 bf16 int4c bf16c; do
    m=bench-mlx; case $q in int4*) m=bench-mlx-q4 ;; esac
    HB_MLX_RUNNER=$plain; case $q in *c) HB_MLX_RUNNER=$wrap ;; esac
    [ -n "$HB_MLX_RUNNER" ] || { hb_na "mlx-$q-x1" gen "runner-mlx has no --compute"; continue; }
    for n in 1 "$HB_CONC"; do
      local label=mlx-$q-x16 ctx=$HB_CTX16 ph=(gen:"$HB_R" mem)
      [ "$n" = 1 ] && label=mlx-$q-x1 ctx=$HB_CTX1 ph=(gen:"$HB_R" probe:"$HB_PROBES" mem)
      if [ $(( $(date +%s) - t0 )) -gt "${HB_MLX_BUDGET:-720}" ]; then
        hb_na "$label" gen "not run: the mlx phase's ${HB_MLX_BUDGET:-720} s were spent"; continue
      fi
      hb_stamp "mlx $q x$n"
      hb_serve "$n" "$ctx" "$HB_RUNNER" || continue
      # One request loads the model before the concurrent rounds: concurrent first requests race
      # in the server's MLX model-dir preparation (engine/mlx_model.rs prepare_dir: one temp dir
      # name per process), failing with "File exists" / "tokenizer.json is missing".
      python3 -c 'import json,sys,urllib.request as u; u.urlopen(u.Request(sys.argv[1]+"/api/generate", json.dumps(dict(model=sys.argv[2], prompt="a", stream=False, options=dict(num_predict=1, num_ctx=int(sys.argv[3])))).encode(), {"Content-Type": "application/json"}), timeout=600).read()' \
        "$(HB_URL)" "$m" "$ctx" || hb_stamp "mlx $q x$n: the loading request failed"
      hb_client "$label" "$n" --model "$m" --num-ctx "$ctx" "${ph[@]}"
    done
  done
  hb_stop
  hb_mlx_real "$W/smol.gguf"
  hb_stamp "mlx phase done"
}

# hb_mlx_real GGUF: the copy task on runner-mlx, after phase real left SmolLM2's GGUF at GGUF:
# converted to an MLX checkpoint by runner-mlx itself (convert-gguf, as
# scripts/make-mlx-test-model does), served without and with 16-token n-gram drafts. Labels
# mlx-real-x1, mlx-real-x1-ngram16 (rcopy, greedy).
hb_mlx_real() {
  # The plain runner (hb_mlx's loop leaves HB_MLX_RUNNER at its last wrapper, --compute bf16).
  local gguf=$1 dir=$W/mlx-real w HB_MLX_RUNNER=$HB_MLX_BIN
  [ -s "$gguf" ] || { hb_na mlx-real-x1 rcopy "no real model: phase real did not run"; return 0; }
  rm -rf "$dir" && mkdir -p "$dir"
  "$HB_MLX_BIN" convert-gguf "$gguf" "$dir/smol" > "$W/logs/mlx-real-convert.log" 2>&1 \
    || { hb_na mlx-real-x1 rcopy "convert-gguf: $(tail -1 "$W/logs/mlx-real-convert.log")"; return 0; }
  hb_serve 1 "$HB_CTX1" "$HB_RUNNER" || return 0
  printf 'FROM %s\n' "$dir/smol" > "$dir/Modelfile"
  [ -z "${HB_THREADS:-}" ] || echo "PARAMETER num_thread $HB_THREADS" >> "$dir/Modelfile"
  OLLAMA_HOST="127.0.0.1:$HB_PORT" "$HB_HERD" create smol-mlx --experimental -f "$dir/Modelfile" \
    > "$dir/create.log" 2>&1 || { hb_na mlx-real-x1 rcopy "herd create smol-mlx: $(tail -1 "$dir/create.log")"; hb_stop; return 0; }
  hb_client mlx-real-x1 1 --model smol-mlx --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  if w=$(HB_RUNNER=$HB_MLX_BIN hb_wrapper ngram16 --draft-ngram 16) && HB_MLX_RUNNER=$w hb_serve 1 "$HB_CTX1" "$HB_RUNNER"; then
    hb_client mlx-real-x1-ngram16 1 --model smol-mlx --num-ctx "$HB_CTX1" rcopy:"$HB_R"
  else
    hb_na mlx-real-x1-ngram16 rcopy "runner-mlx has no --draft-ngram"
  fi
  hb_stop
}
