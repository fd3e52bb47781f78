#!/usr/bin/env python3
"""Driver for scripts/bench engine: runner-llamacpp (Unix socket, runner protocol) vs llama-server (TCP),
same model, same threads, same slots. Measures, from the client's wall clock:

  prefill tok/s = prompt tokens / time, requests of --prompt-tokens tokens with 1 generated token
  decode  tok/s = generated tokens / time, short prompts with --decode-tokens generated tokens

at 1 and 4 concurrent streams, prompt caching off on both sides. Each rate is given per wall
second and per CPU second of the engine process (utime + stime from /proc): on a shared machine
the CPU-second rate is the steadier comparison. Both engines stay loaded. Within a round each
measurement runs four times in an ABBA order (runner, server, server, runner; the next round
starts with the server), and an engine's rate is its two runs together: whatever drifts during a
block, and whoever goes first after an idle spell, weighs on both engines alike (with one run
each, always the runner first, the prefill x1 ratio read 0.92 over 5 rounds; back-to-back runs of
one engine differ by up to 12 % on this VM). One-stream measurements take two ABBA blocks.
Prints a table per round and the ratios runner / llama-server (> 1 means the runner is faster);
with --rounds N also the median ratio. One small warm-up request per engine.
"""

import argparse
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=600):
        super().__init__("runner", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


def post(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}: {data[:300]!r}")
    return data


class Runner:
    name = "runner"

    def __init__(self, exe, model, threads, slots, ctx):
        self.dir = tempfile.mkdtemp(prefix="herd-bench-")
        self.sock = os.path.join(self.dir, "r.sock")
        self.proc = subprocess.Popen(
            [exe, "--model", model, "--socket", self.sock, "--threads", str(threads),
             "--parallel", str(slots), "--ctx-size", str(ctx), "--batch", "512"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while True:
            try:
                c = UnixHTTPConnection(self.sock, timeout=5)
                c.request("GET", "/health")
                if json.loads(c.getresponse().read()).get("status") == "ready":
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("runner did not become ready")
            time.sleep(0.1)

    def tokens(self, text):
        c = UnixHTTPConnection(self.sock)
        return json.loads(post(c, "/tokenize", {"content": text, "add_special": True}))["tokens"]

    def complete(self, tokens, n):
        c = UnixHTTPConnection(self.sock)
        body = {"prompt": tokens, "num_predict": n, "cache_prompt": False,
                "sampling": {"temperature": 0.0}}
        lines = post(c, "/completion", body).decode().splitlines()
        done = json.loads(lines[-1])
        assert done["type"] == "done", done
        return done["prompt_eval_count"] + done["cached_tokens"], done["eval_count"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Server:
    name = "llama-server"

    def __init__(self, exe, model, threads, slots, ctx):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.proc = subprocess.Popen(
            [exe, "-m", model, "--host", "127.0.0.1", "--port", str(self.port), "-t", str(threads),
             "-tb", str(threads), "-np", str(slots), "-c", str(ctx * slots), "-b", "512",
             "--no-webui", "--swa-full"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env=dict(os.environ, LD_LIBRARY_PATH=os.path.dirname(os.path.abspath(exe))))
        deadline = time.time() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError("llama-server did not become ready")
            time.sleep(0.1)

    def complete(self, tokens, n):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        body = {"prompt": tokens, "n_predict": n, "cache_prompt": False, "temperature": 0.0}
        t = json.loads(post(c, "/completion", body))["timings"]
        return t["prompt_n"], t["predicted_n"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def concurrent(engine, prompts, n):
    """Run one request per prompt at once; (prompt tokens, generated tokens, wall s, CPU s)."""
    results = [None] * len(prompts)
    cpu0 = cpu_seconds(engine.proc.pid)

    def one(i):
        results[i] = engine.complete(prompts[i], n)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - start
    cpu = max(cpu_seconds(engine.proc.pid) - cpu0, 1e-9)
    return sum(r[0] for r in results), sum(r[1] for r in results), took, cpu


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runner", required=True)
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    ctx = max(1024, a.prompt_tokens + a.decode_tokens + 64)

    # The same token ids go to both engines: tokenized once by the runner.
    r = Runner(a.runner, a.model, a.threads, 4, ctx)
    filler = " ".join(f"The number {i} is followed by {i + 1}." for i in range(400))
    base = r.tokens(filler)
    prompts_long = [base[k:k + a.prompt_tokens] for k in range(0, 4 * 7, 7)]
    shorts = ["Once upon a time", "The history of Rome", "In the beginning of the", "A recipe for bread:"]
    prompts_short = [r.tokens(s) for s in shorts]
    r.stop()

    # Both engines stay loaded (an idle engine uses no CPU) and each measurement alternates
    # runner, llama-server within a round, so load changes on a shared machine hit both alike.
    engines = [Runner(a.runner, a.model, a.threads, 4, ctx), Server(a.server, a.model, a.threads, 4, ctx)]
    ratios = {}
    try:
        for eng in engines:
            eng.complete(prompts_short[0], 4)  # warm-up
        for rnd in range(1, a.rounds + 1):
            rows = {}
            order = engines + engines[::-1] if rnd % 2 else engines[::-1] + engines
            for streams in (1, 4):
                for kind, prompts, n in (("prefill", prompts_long, 1), ("decode", prompts_short, a.decode_tokens)):
                    acc = {}
                    # One-stream runs are short (2-4 s) and swing most: two ABBA blocks.
                    for eng in order * (2 if streams == 1 else 1):
                        p, g, t, c = concurrent(eng, prompts[:streams], n)
                        done = p if kind == "prefill" else g
                        x = acc.setdefault(eng.name, [0, 0.0, 0.0])
                        x[0] += done
                        x[1] += t
                        x[2] += c
                    for name, (done, t, c) in acc.items():
                        rows[(name, kind, streams)] = (done / t, done / c)
            print(f"\nround {rnd}: gemma-3-270m Q4_K_M, CPU, threads={a.threads}, prompt {a.prompt_tokens} tok, "
                  f"decode {a.decode_tokens} tok; tok/s per wall second | per CPU second (ABBA: x1 4 runs each, x4 2)")
            print(f"{'metric':12s} {'runner':>17s} {'llama-server':>17s} {'ratio wall':>11s} {'ratio CPU':>10s}")
            for kind in ("prefill", "decode"):
                for streams in (1, 4):
                    (xw, xc), (yw, yc) = rows[("runner", kind, streams)], rows[("llama-server", kind, streams)]
                    ratios.setdefault((kind, streams), []).append(xc / yc)
                    print(f"{kind + ' x' + str(streams):12s} {xw:8.1f} | {xc:6.1f} {yw:8.1f} | {yc:6.1f} "
                          f"{xw / yw:11.2f} {xc / yc:10.2f}", flush=True)
    finally:
        for eng in engines:
            eng.stop()
    if a.rounds > 1:
        print(f"\nCPU-second ratio runner / llama-server over {a.rounds} rounds (median; all rounds)")
        for (kind, streams), v in ratios.items():
            med = sorted(v)[len(v) // 2] if len(v) % 2 else sum(sorted(v)[len(v) // 2 - 1:len(v) // 2 + 1]) / 2
            print(f"{kind + ' x' + str(streams):12s} {med:6.2f}   " + " ".join(f"{x:.2f}" for x in v))


if __name__ == "__main__":
    main()
