#!/usr/bin/env python3
"""Driver for scripts/bench mlx: runner-mlx vs runner-llamacpp over the runner protocol, on the
same SmolLM2 weights (GGUF Q4_1 and its MLX 4-bit conversion), one stream, prompt caching off.

  prefill tok/s = prompt tokens / time, a --prompt-tokens prompt with 1 generated token
  decode  tok/s = generated tokens / time, a short prompt with --decode-tokens generated tokens

Each measurement runs in ABBA order (llama.cpp, MLX, MLX, llama.cpp) and an engine's rate is its
two runs together, so drift on the shared machine weighs on both alike. Rates are per wall second
and per CPU second of the engine process. The runner harness is engine.py's (both runners take
the same flags).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine import Runner, concurrent  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--mlx", required=True)
    ap.add_argument("--mlx-model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--decode-tokens", type=int, default=64)
    a = ap.parse_args()
    ctx = a.prompt_tokens + a.decode_tokens + 64
    engines = {
        "runner-llamacpp": Runner(a.llama, a.gguf, a.threads, 1, ctx),
        "runner-mlx": Runner(a.mlx, a.mlx_model, a.threads, 1, ctx),
    }
    try:
        base = engines["runner-llamacpp"]
        words = base.tokens("The quick brown fox jumps over the lazy dog. " * (a.prompt_tokens // 8))
        long_prompt = words[: a.prompt_tokens]
        short_prompt = base.tokens("Once upon a time, there was a little")
        for e in engines.values():
            e.complete(short_prompt, 2)  # warm-up
        order = ["runner-llamacpp", "runner-mlx", "runner-mlx", "runner-llamacpp"]
        rates = {}
        for what, prompt, n in [("prefill", long_prompt, 1), ("decode", short_prompt, a.decode_tokens)]:
            tot = {k: [0, 0.0, 0.0] for k in engines}
            for name in order:
                p, g, wall, cpu = concurrent(engines[name], [prompt], n)
                count = p if what == "prefill" else g
                tot[name][0] += count
                tot[name][1] += wall
                tot[name][2] += cpu
            for name, (count, wall, cpu) in tot.items():
                rates[(what, name)] = (count / wall, count / cpu)
                print(f"{what:8} {name:16} {count / wall:9.1f} tok/s wall {count / cpu:9.1f} tok/CPU-s")
        for what in ["prefill", "decode"]:
            m, l = rates[(what, "runner-mlx")], rates[(what, "runner-llamacpp")]
            print(f"ratio {what:8} runner-mlx / runner-llamacpp: {m[0] / l[0]:.3f} wall, {m[1] / l[1]:.3f} CPU")
    finally:
        for e in engines.values():
            e.stop()


if __name__ == "__main__":
    main()
