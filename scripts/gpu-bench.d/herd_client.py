#!/usr/bin/env python3
"""Bench client for `herd serve` (and llama-server, same prompts) over HTTP; stdlib only.

Used by scripts/gpu-bench's herd phases on the device and by `scripts/gpu-bench smoke` on a CPU.
One invocation = one engine configuration (LABEL) and a list of PHASE:ROUNDS items. Every request
and every round is appended as one JSON line to --out; scripts/gpu-bench.d/summarize.py turns the
lines of a whole run into summary.json. A phase the server refuses (HTTP 4xx/5xx on its first
request, e.g. a switch that does not exist yet) is recorded as {"status": "n/a"} and the next
phase runs: a missing feature never fails the run.

Phases (each starts with one uncounted warm-up round of 16 tokens, except probe and mem):
  gen    herd: POST /api/generate raw, sampled, streamed; server: POST /completion (ignore_eos)
  probe  the same with num_predict 1, one stream at a time (TTFT)
  chat   POST /v1/chat/completions streamed, include_usage (herd only)
  fmt    gen plus a small JSON schema as "format" (the research note's schema)
  ff20   greedy, a schema of 20 required boolean properties (mostly forced tokens)
  rprobe probe's request sent to the model's runner on its Unix socket (/completion), bypassing
         herd's server: herd's probe TTFT - this one's is the server's hop (paired by seed)
  copy   greedy, the prompt holds ~400 tokens of text to repeat (n-gram drafter's best case)
  rcopy  greedy, raw: the same text twice, then its first words (a small base or instruct model
         continues the third copy where it would not follow the instruction of copy)
  mem    /api/ps size and size_vram against nvidia-smi's memory for the runner process

Measures (as shared/research/gpu-herd-e2e.md): TTFT = request sent -> first chunk with text;
client rate = (tokens - 1) / (final event - first text chunk); engine rate = eval_count /
eval_duration (llama-server: predicted_per_second); x16 aggregate = sum of the per-stream client
rates, and tokens / round wall. Requests of the same (phase, round, stream) get the same seed and
text on every engine, so results pair across labels (TTFT differences, greedy byte-identity).
"""
import argparse, hashlib, http.client, json, os, random, socket, subprocess, sys, threading, time
from urllib.parse import urlparse

SAMPLED = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
GREEDY = dict(temperature=0.0)
# The research note's constrained-decoding schema.
FMT = {"type": "object", "properties": {"a": {"type": "string"},
       "b": {"type": "array", "items": {"type": "integer"}}}, "required": ["a", "b"]}
# 20 required properties with one-token values: almost every output token is forced (SmolLM2
# pretty-prints ~13 tokens a field, so ~280 tokens complete the object).
FF20 = {"type": "object", "additionalProperties": False,
        "properties": {f"field_{i:02d}": {"type": "boolean"} for i in range(1, 21)},
        "required": [f"field_{i:02d}" for i in range(1, 21)]}
WORDS = ("the of and to in is that for it as with was on be by at this from have or an are not but "
         "which one all were when we there can more if will about out up so what some time than "
         "other into them these would could first water been call who its now find long down day "
         "did get come made may part over new sound take only little work know place year live me "
         "back give most very after thing our just name good sentence man think say great where "
         "help through much before line right too mean old any same tell boy follow came want show "
         "also around form three small set put end does another well large must big even such").split()


def text_prompt(seed, words=123):
    """123 seeded words of 6 lowercase letters: 504-523 tokens on the bench model's tokenizer."""
    rng = random.Random(seed)
    return " ".join("".join(chr(97 + rng.randrange(26)) for _ in range(6)) for _ in range(words))


def copy_body(seed, words):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def copy_prompt(seed, words):
    body = copy_body(seed, words)
    return (f"Repeat the following text exactly, word for word, and nothing else.\n\n{body}\n\n"
            f"Now repeat it exactly:\n{' '.join(body.split()[:4])}")


def raw_copy_prompt(seed, words):
    body = copy_body(seed, words)
    return f"{body}\n\n{body}\n\n{' '.join(body.split()[:4])}"


class Client:
    def __init__(s, a):
        s.a = a
        u = urlparse(a.url)
        s.host, s.port = u.hostname, u.port or 80
        s.out = open(a.out, "a")
        s.lock = threading.Lock()

    def emit(s, rec):
        rec = dict(label=s.a.label, conc=s.a.conc, **rec)
        with s.lock:
            s.out.write(json.dumps(rec) + "\n")
            s.out.flush()

    def conn(s):
        # A stalled stream must not eat the device call: --timeout bounds each socket read.
        return http.client.HTTPConnection(s.host, s.port, timeout=s.a.timeout)

    def runner_conn(s):
        """The model's runner, on the socket herd's log names last ("runner started socket="),
        read once per client (its phases share one loaded model)."""
        if getattr(s, "socket", None) is None:
            with open(s.a.mark) as f:
                for line in f:
                    if "runner started" in line and "socket=" in line:
                        s.socket = line.split("socket=", 1)[1].split()[0]
        path = getattr(s, "socket", None)
        if path is None:
            raise RuntimeError("no runner socket in herd's log")
        timeout = s.a.timeout

        class Unix(http.client.HTTPConnection):
            def connect(self):
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.settimeout(timeout)
                self.sock.connect(path)
        return Unix("runner", timeout=timeout)

    def get(s, path):
        c = s.conn()
        c.request("GET", path)
        r = c.getresponse()
        return r.status, json.loads(r.read() or b"null")

    def draft_counts(s):
        """herd's /metrics draft counters for this model (drafted, accepted): Ollama's final chunk
        carries none, so a round's counts are the counters' growth over it."""
        if s.a.kind == "server":
            return (0, 0)
        try:
            c = s.conn()
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        except OSError:
            return (0, 0)
        name = s.a.model if ":" in s.a.model else s.a.model + ":latest"
        got = {}
        for line in text.splitlines():
            for key in ("herd_draft_tokens_total", "herd_draft_accepted_tokens_total"):
                if line.startswith(f'{key}{{model="{name}"}} '):
                    got[key] = int(float(line.split()[-1]))
        return (got.get("herd_draft_tokens_total", 0), got.get("herd_draft_accepted_tokens_total", 0))

    # -- one request ---------------------------------------------------------------------------
    def body(s, phase, seed, n):
        a = s.a
        if phase == "copy":
            prompt, samp = copy_prompt(seed, a.copy_words), GREEDY
        elif phase == "rcopy":
            prompt, samp = raw_copy_prompt(seed, a.copy_words), GREEDY
        else:
            prompt, samp = text_prompt(seed, a.prompt_words), (GREEDY if phase == "ff20" else SAMPLED)
        if a.kind == "server":
            return "/completion", dict(prompt=prompt, n_predict=n, cache_prompt=False, stream=True,
                                       ignore_eos=True, seed=seed, **samp)
        if phase == "rprobe":
            return "/completion", dict(prompt=prompt, num_predict=n, add_special=True,
                                       sampling=dict(samp, seed=seed))
        if phase == "chat":
            return "/v1/chat/completions", dict(
                model=a.model, stream=True, stream_options={"include_usage": True}, max_tokens=n,
                temperature=samp["temperature"], top_p=samp["top_p"], seed=seed,
                messages=[{"role": "user", "content": prompt}])
        opts = dict(samp, seed=seed, num_predict=n, num_ctx=a.num_ctx)
        if a.num_batch:
            opts["num_batch"] = a.num_batch
        b = dict(model=a.model, prompt=prompt, stream=True, options=opts, keep_alive="1h")
        if phase != "copy":
            b["raw"] = True  # copy goes through the TEMPLATE: the instruction is a chat turn
        if phase == "fmt":
            b["format"] = FMT
        if phase == "ff20":
            b["format"] = FF20
            b["prompt"] = "Answer with a JSON object of twenty booleans.\n" + prompt[:200] + "\n"
        return "/api/generate", b

    def one(s, phase, seed, n):
        path, body = s.body(phase, seed, n)
        c = s.runner_conn() if phase == "rprobe" else s.conn()
        t0 = time.perf_counter()
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return dict(error=f"HTTP {r.status}: {r.read()[:300].decode(errors='replace')}")
        first = last = None
        done, text = None, []
        for line in r:
            line = line.strip()
            if not line:
                continue
            if s.a.kind == "server" or phase == "chat":
                if not line.startswith(b"data: "):
                    continue
                line = line[6:]
                if line == b"[DONE]":
                    break
            ev = json.loads(line)
            now = time.perf_counter() - t0
            if "error" in ev:
                return dict(error=str(ev["error"])[:300])
            if phase == "rprobe":
                # The runner protocol: {"type": "token", "content"} ..., {"type": "done", "timings"}.
                ev = {**ev, "done": ev.get("type") == "done"}
            raw = s.a.kind == "server" or phase == "rprobe"
            piece = (ev.get("content") if raw else ev.get("response")) or ""
            if phase == "chat":
                ch = ev.get("choices") or [{}]
                piece = (ch[0].get("delta") or {}).get("content") or ""
                if ev.get("usage"):
                    done = ev
            if piece:
                text.append(piece)
                first = now if first is None else first
            last = now
            if ev.get("done") or ev.get("stop"):
                done = ev
        end = time.perf_counter() - t0
        if done is None:
            return dict(error="stream ended without a final event")
        first = end if first is None else first
        rec = dict(ttft_ms=first * 1000, end_ms=end * 1000)
        if s.a.kind == "server":
            t = done["timings"]
            rec.update(ntok=t["predicted_n"], prompt_n=t.get("prompt_n"), prompt_ms=t["prompt_ms"],
                       erate=t["predicted_per_second"], done_reason=done.get("stop_type"))
        elif phase == "rprobe":
            t = done  # the runner's final chunk carries its timings flat
            rec.update(ntok=t.get("eval_count", 0), prompt_n=t.get("prompt_eval_count"),
                       prompt_ms=(t.get("prompt_eval_duration_ns") or 0) / 1e6, erate=None,
                       done_reason=done.get("done_reason"))
        elif phase == "chat":
            u = done["usage"]
            rec.update(ntok=u["completion_tokens"], prompt_n=u["prompt_tokens"], erate=None)
        else:
            ed = done.get("eval_duration") or 0
            rec.update(ntok=done.get("eval_count", 0), prompt_n=done.get("prompt_eval_count"),
                       prompt_ms=(done.get("prompt_eval_duration") or 0) / 1e6,
                       erate=done.get("eval_count", 0) / (ed / 1e9) if ed else None,
                       done_reason=done.get("done_reason"))
            # Speculative-decoding stats: whatever draft/accept counters the final chunk carries.
            for k, v in done.items():
                if ("draft" in k or "accept" in k) and isinstance(v, (int, float)):
                    rec[k] = v
        out = "".join(text)
        rec["crate"] = (rec["ntok"] - 1) / (last - first) if rec["ntok"] > 1 and last > first else 0
        rec["digest"] = hashlib.sha1(out.encode()).hexdigest()[:12]
        if phase in ("fmt", "ff20"):
            try:
                json.loads(out)
                rec["json_ok"] = True
            except ValueError:
                rec["json_ok"] = False
        return rec

    # -- rounds and phases ---------------------------------------------------------------------
    def round(s, phase, rnd, n, k, seed0):
        res = [None] * k

        def run(i):
            try:
                res[i] = s.one(phase, seed0 + i, n)
            except Exception as e:  # a broken stream is data, not a crash of the whole bench
                res[i] = dict(error=f"{type(e).__name__}: {e}")

        th = [threading.Thread(target=run, args=(i,)) for i in range(k)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        return res, time.perf_counter() - t0

    def phase(s, name, rounds):
        a = s.a
        base = dict(gen=100, fmt=100, chat=100, probe=5000, rprobe=5000, ff20=7000, copy=9000, rcopy=9000)[name]
        k = 1 if name in ("probe", "rprobe") else a.conc
        n = {"probe": 1, "rprobe": 1, "ff20": a.ff_predict, "copy": a.copy_predict, "rcopy": a.copy_predict}.get(name, a.num_predict)
        stamp(f"{a.label} {name}:{rounds} x{k}")
        if a.mark:
            # summarize.py --herd-log charges the runner's stats lines that follow to this phase.
            with open(a.mark, "a") as f:
                f.write(f"== client {a.label}.{name}\n")
        probe = name in ("probe", "rprobe")
        if not probe:
            res, _ = s.round(name, 0, 16, k, base + 50_000)
            errs = [x["error"] for x in res if "error" in x]
            if errs:
                s.emit(dict(phase=name, status="n/a", reason=errs[0]))
                stamp(f"  n/a: {errs[0]}")
                return
        for rnd in range(1, rounds + 1):
            # Probes: one stream per round, its own seed; others: the round's seeds pair across labels.
            seed0 = base + (rnd if probe else 100 * rnd)
            d0 = s.draft_counts()
            res, wall = s.round(name, rnd, n, k, seed0)
            d1 = s.draft_counts()
            ok = [x for x in res if "error" not in x]
            for i, x in enumerate(res):
                s.emit(dict(phase=name, round=rnd, stream=i, seed=seed0 + i, **x))
            if not ok:
                s.emit(dict(phase=name, status="n/a", reason=res[0]["error"]))
                stamp(f"  n/a: {res[0]['error']}")
                return
            tok = sum(x["ntok"] for x in ok)
            cr = sorted(x["crate"] for x in ok)
            tt = sorted(x["ttft_ms"] for x in ok)
            rec = dict(phase=name, round=rnd, summary=True, errors=len(res) - len(ok), tokens=tok,
                       wall_s=wall, tok_per_wall=tok / wall, sum_crate=sum(cr),
                       sum_erate=sum(x["erate"] or 0 for x in ok), median_crate=cr[len(cr) // 2],
                       ttft_median_ms=tt[len(tt) // 2], ttft_max_ms=tt[-1],
                       drafted=sum(x.get("drafted", 0) for x in ok) or d1[0] - d0[0],
                       accepted=sum(x.get("accepted", 0) for x in ok) or d1[1] - d0[1])
            s.emit(rec)
            stamp(f"  round {rnd}: tokens {tok} wall {wall:.2f}s sum-client {rec['sum_crate']:.1f} t/s"
                  f" median {rec['median_crate']:.1f} TTFT median {rec['ttft_median_ms']:.1f} ms"
                  + (f" drafted {rec['drafted']} accepted {rec['accepted']}" if rec["drafted"] else "")
                  + (f" errors {rec['errors']}" if rec["errors"] else ""))

    def mem(s):
        st, ps = s.get("/api/ps")
        models = (ps or {}).get("models") or []
        m = next((x for x in models if x.get("name", "").split(":")[0] == s.a.model.split(":")[0]),
                 models[0] if models else None)
        rec = dict(phase="mem", size=m and m.get("size"), size_vram=m and m.get("size_vram"))
        pids = runner_pids(s.a.herd_pid) if s.a.herd_pid else []
        rec["runner_pids"] = pids
        if pids:
            rec["runner_rss"] = sum(rss(p) for p in pids)
        try:
            q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True,
                               timeout=30)
            apps = [[c.strip() for c in l.split(",")] for l in q.stdout.splitlines() if l.count(",") == 2]
            rec["smi_apps"] = apps
            # By pid; by name when the pids differ (nvidia-smi may see another pid namespace).
            mine = [a for a in apps if a[0].isdigit() and int(a[0]) in pids] or \
                [a for a in apps if "runner-" in a[1]]
            rec["smi_runner_mib"] = sum(int(a[2]) for a in mine if a[2].isdigit()) or None
        except (OSError, ValueError, subprocess.SubprocessError) as e:
            rec["smi_error"] = str(e)[:200]
        if rec.get("size_vram") and rec.get("smi_runner_mib"):
            rec["size_vram_over_smi"] = rec["size_vram"] / (rec["smi_runner_mib"] * 2**20)
        s.emit(rec)
        stamp(f"  mem: {json.dumps({k: v for k, v in rec.items() if k != 'smi_apps'})}")


def runner_pids(herd_pid):
    """The runner processes herd serve started: its children (by /proc's parent pid)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        if int(st.rsplit(")", 1)[1].split()[1]) == herd_pid and "runner" in st.split("(", 1)[1]:
            out.append(int(d))
    return out


def rss(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))
    except (OSError, StopIteration):
        return 0


def stamp(msg):
    print(f"[{time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:11434")
    p.add_argument("--kind", choices=["herd", "server"], default="herd")
    p.add_argument("--model", default="bench")
    p.add_argument("--label", required=True)
    p.add_argument("--conc", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--num-predict", type=int, default=256)
    p.add_argument("--num-ctx", type=int, default=8192)
    p.add_argument("--num-batch", type=int, default=0, help="0: leave Ollama's default (512)")
    p.add_argument("--prompt-words", type=int, default=123, help="123: 504-523 tokens (bench model)")
    p.add_argument("--copy-words", type=int, default=300, help="~400 tokens of text to repeat")
    p.add_argument("--copy-predict", type=int, default=256)
    p.add_argument("--ff-predict", type=int, default=256)
    p.add_argument("--timeout", type=float, default=float(os.environ.get("HB_TIMEOUT", 300)),
                   help="seconds one socket read may wait (env HB_TIMEOUT)")
    p.add_argument("--herd-pid", type=int, default=0, help="for mem: the herd serve process")
    p.add_argument("--mark", help="herd serve's log: a '== client LABEL.PHASE' line before each phase")
    p.add_argument("phases", nargs="+", help="PHASE:ROUNDS, e.g. gen:3 probe:5 mem")
    a = p.parse_args()
    c = Client(a)
    for item in a.phases:
        name, _, n = item.partition(":")
        if name == "mem":
            c.mem()
        else:
            c.phase(name, int(n or 1))


if __name__ == "__main__":
    main()
