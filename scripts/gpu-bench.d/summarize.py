#!/usr/bin/env python3
"""summary.json (and a text table) from one run's herd_client.py lines and llama-batched-bench log.

    summarize.py RESULTS.jsonl [BATCHED_BENCH.log] --json summary.json --conc 16 >> summary.txt

Every number comes from the same run. A ratio whose inputs are missing (a phase that was n/a,
no GPU, no batched-bench) is the string "n/a: <why>", never a guess. The ratios are the ones
issue 19's "Done when" names:
  x16_over_bb16       herd 16 streams (mean of rounds, sum of per-stream client rates) / B=16 S_TG
  x1_over_bb1         herd 1 stream (mean client rate) / B=1 S_TG
  x16_over_bb16_tg256, x1_over_bb1_tg256  the same against batched-bench generating 256 tokens
                      (herd's streams generate 256; the issue's baseline generated 128)
  ttft_minus_server   median over probes of herd TTFT - llama-server TTFT, paired by seed (ms)
  ttft_server_hop_ms  median of herd's probe TTFT - the same request sent to the runner's socket
  ttft_runner_beyond_prompt_ms  median of the runner-socket probe's TTFT - its prompt evaluation
  fmt_over_free_x1 / _x16  per-stream median client rate, JSON schema / free (same label);
                           _x16_nohold the same without the first-token hold
  ff_speedup          ff20 output tokens/s (engine rate, mean) fast-forward on / off
  ngram_speedup       copy task tokens/s (engine rate) with the n-gram drafter / without, x1
  sd_acceptance       accepted / drafted over the self-draft requests; sd t/s / no-draft t/s
                      (the random 8B drafts nothing: real_sd_* are SmolLM2 drafting for itself,
                      copy task and sampled text, x1 and x16)
  size_vram_over_smi  /api/ps size_vram / nvidia-smi's memory of the runner process (x16)
and issue 18's (phase mlx: runner-mlx on the same weights as MLX int4 and bf16, labels
mlx-int4-x1 ... mlx-bf16-x16, against runner-llamacpp's Q4_K_M, labels herd-x1 / herd-x16):
  mlx_<q>_over_q4km_x1 / _x16         decode (sum of client rates, mean of rounds) MLX / Q4_K_M
  mlx_<q>_ttft_over_q4km_x1           median probe TTFT (num_predict 1, one stream) MLX / Q4_K_M
  mlx_<q>_ttft_over_q4km_x16          median TTFT of the x16 rounds (mean of rounds) MLX / Q4_K_M
  (q: int4, bf16, and int4c, bf16c for the same models computing in bfloat16)
and the real-model copy task (phase real: SmolLM2 from the dev box, labels real-x1 / real-x1-ngram):
  real_ngram_speedup  copy task tokens/s (engine rate) with the n-gram drafter / without, x1
  mlx_real_ngram16_speedup  the same on runner-mlx (phase mlx, SmolLM2 converted to MLX), K=16
  real_ngram16_speedup, real_ngram16_onegraph_speedup  the same with 16-token drafts, and with
                      one CUDA graph for all token counts (--no-graph-per-shape; the runner keeps
                      one per count, patch 0005, since run O); x16_onegraph_over_bb16 and
                      fmt_over_free_x16_onegraph the x16 ratios with it (HB_OLD_AB=1)
  x1_devsamp_over_bb1   x1 with device top-k (--device-sampling auto, HB_OLD_AB=1; the
                      runner samples whole rows on the host by default)
  x16_nopad_over_bb16, fmt_over_free_x16_nopad  the x16 ratios without step padding
  x16_t1_over_bb16, fmt_over_free_x16_t1, x1_t1_over_bb1  with one llama.cpp thread
  fmt_over_free_x16_mal  constrained / free x16 with --mask-after-launch (grammar::gate)
  fmt_over_free_x16_nomal, x16_nomal_over_bb16  with --mask-after-launch off (on is the GPU default since run Z)
  x16_nopw_over_bb16, fmt_over_free_x16_nopw  with --prewake off (the sampling pool woken when the logits land)
                      (--step-padding off; the runner pads one-token decode steps on a GPU)
With --herd-log, the runner's stats lines in herd serve's log (`--step-stats` per-phase ms a
decode step, `grammar mask` percentiles per request) are grouped by the client phase that ran
them (herd_client.py --mark) under numbers["runner_stats"].
"""
import argparse, json, re, statistics, sys


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                recs.append(json.loads(line))
    return recs


def batched_bench(path, tg=128):
    """{B: S_TG t/s} of the rows generating `tg` tokens, from llama-batched-bench's markdown table."""
    out = {}
    if not path:
        return out
    try:
        lines = [l for l in open(path) if l.startswith("|")]
    except OSError:
        return out
    if not lines:
        return out
    head = [c.strip() for c in lines[0].strip().strip("|").split("|")]
    for l in lines[1:]:
        cells = [c.strip() for c in l.strip().strip("|").split("|")]
        if len(cells) != len(head) or not re.match(r"^\d+$", cells[head.index("B")]):
            continue
        if "TG" in head and cells[head.index("TG")] != str(tg):
            continue
        out[int(cells[head.index("B")])] = float(cells[head.index("S_TG t/s")])
    return out


STEP = re.compile(r"step stats: (\d+) decode steps .*?([\d.]+) rows/step, ms/step: (.*?) \| total ([\d.]+)")
MASK = re.compile(r"grammar mask: tokens=(\d+) p50_us=([\d.]+) p99_us=([\d.]+) max_us=([\d.]+) "
                  r"engine_p50_us=([\d.]+) engine_p99_us=([\d.]+)(?: wait_p50_us=([\d.]+) wait_p99_us=([\d.]+))?")


def runner_stats(path):
    """{label.phase: step-phase means and grammar-mask medians} from herd serve's log."""
    groups, cur = {}, None
    try:
        lines = open(path, errors="replace").read().splitlines()
    except (OSError, TypeError):
        return {}
    for line in lines:
        if line.startswith("== client "):
            cur = groups.setdefault(line.split()[2], dict(steps=[], masks=[]))
        elif cur is not None and (m := STEP.search(line)):
            parts = m.group(3).split()
            ms = {parts[i]: float(parts[i + 1]) for i in range(0, len(parts) - 1, 2)}
            cur["steps"].append(dict(rows_per_step=float(m.group(2)), total=float(m.group(4)), **ms))
        elif cur is not None and (m := MASK.search(line)):
            cur["masks"].append([float(x) for x in m.groups() if x is not None])
    out = {}
    for k, g in groups.items():
        r = {}
        if g["steps"]:
            keys = g["steps"][0].keys()
            r["step_ms_mean"] = {q: round(statistics.mean(st[q] for st in g["steps"] if q in st), 3) for q in keys}
            r["step_lines"] = len(g["steps"])
        if g["masks"]:
            cols = ["tokens", "p50_us", "p99_us", "max_us", "engine_p50_us", "engine_p99_us", "wait_p50_us", "wait_p99_us"]
            r["grammar_mask_median"] = {c: round(statistics.median(m[i] for m in g["masks"] if len(m) > i), 1)
                                        for i, c in enumerate(cols) if any(len(m) > i for m in g["masks"])}
            r["grammar_mask_requests"] = len(g["masks"])
        if r:
            out[k] = r
    return out


class Run:
    def __init__(s, recs):
        s.recs = recs

    def rounds(s, label, phase):
        return [r for r in s.recs if r.get("label") == label and r.get("phase") == phase and r.get("summary")]

    def reqs(s, label, phase):
        return [r for r in s.recs if r.get("label") == label and r.get("phase") == phase
                and "round" in r and not r.get("summary") and "error" not in r]

    def na(s, label, phase):
        for r in s.recs:
            if r.get("label") == label and r.get("phase") == phase and r.get("status") == "n/a":
                return f"n/a: {label} {phase}: {r.get('reason')}"
        if not s.rounds(label, phase):
            return f"n/a: {label} {phase} not measured"
        return None

    def mean(s, label, phase, key):
        why = s.na(label, phase)
        if why:
            return why
        return statistics.mean(r[key] for r in s.rounds(label, phase))

    def req_mean(s, label, phase, key):
        v = [r[key] for r in s.reqs(label, phase) if r.get(key)]
        return statistics.mean(v) if v else (s.na(label, phase) or f"n/a: no {key} in {label} {phase}")

    def mem(s, label):
        return next((r for r in s.recs if r.get("label") == label and r.get("phase") == "mem"), None)


def ratio(a, b, digits=3):
    if isinstance(a, str):
        return a
    if isinstance(b, str):
        return b
    return round(a / b, digits) if b else "n/a: division by zero"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("results", nargs="?")
    p.add_argument("batched_bench", nargs="?")
    p.add_argument("--json")
    p.add_argument("--herd-log", help="herd serve's log: the runner's step and grammar-mask stats")
    p.add_argument("--conc", type=int, default=16)
    p.add_argument("--check", metavar="SUMMARY_JSON", help="fail unless the phases every run has measured")
    p.add_argument("--require", default="llama", help="with --check: the phase groups that ran (llama,mlx)")
    a = p.parse_args()
    if a.check:
        return check(a.check, [g for g in a.require.split(",") if g])
    run = Run(load(a.results))
    bb = batched_bench(a.batched_bench)
    bbv = lambda b: bb.get(b, f"n/a: no batched-bench B={b}")
    # The same ceiling generating 256 tokens, as herd's streams do (a longer KV on average).
    bb256 = batched_bench(a.batched_bench, 256)
    bbv256 = lambda b: bb256.get(b, f"n/a: no batched-bench B={b} TG=256")
    n = {}  # every number, by name
    for label in sorted({r.get("label") for r in run.recs}):
        for phase in sorted({r.get("phase") for r in run.recs if r.get("label") == label}):
            if phase == "mem":
                n[f"{label}.mem"] = {k: v for k, v in run.mem(label).items() if k not in ("label", "phase")}
                continue
            rs = run.rounds(label, phase)
            if not rs:
                n[f"{label}.{phase}"] = run.na(label, phase)
                continue
            reqs = run.reqs(label, phase)
            n[f"{label}.{phase}"] = dict(
                rounds=len(rs), requests=len(reqs), sum_client_tps=[round(r["sum_crate"], 1) for r in rs],
                sum_engine_tps=[round(r["sum_erate"], 1) for r in rs],
                tok_per_wall=[round(r["tok_per_wall"], 1) for r in rs],
                median_stream_tps=[round(r["median_crate"], 1) for r in rs],
                ttft_median_ms=[round(r["ttft_median_ms"], 1) for r in rs],
                ttft_max_ms=[round(r["ttft_max_ms"], 1) for r in rs],
                tokens=[r["tokens"] for r in rs], errors=sum(r["errors"] for r in rs),
                drafted=sum(r.get("drafted", 0) for r in rs), accepted=sum(r.get("accepted", 0) for r in rs),
                done_reasons=sorted({str(q.get("done_reason")) for q in reqs}),
                json_ok=(sum(1 for q in reqs if q.get("json_ok")) if phase in ("fmt", "ff20") else None),
                digests=sorted({q["digest"] for q in reqs}) if phase in ("copy", "rcopy", "ff20") else None)
    n["batched_bench_s_tg"] = bb or "n/a: no batched-bench log"
    n["runner_stats"] = runner_stats(a.herd_log)

    x16, x1 = "herd-x16", "herd-x1"
    med = lambda label, ph: run.mean(label, ph, "median_crate")
    agg = lambda label, ph: run.mean(label, ph, "sum_crate")
    probes = {}
    for label in ("herd-x1", "server-x1"):
        probes[label] = {r["seed"]: r["ttft_ms"] for r in run.reqs(label, "probe")}
    diffs = [probes["herd-x1"][k] - probes["server-x1"][k] for k in probes["herd-x1"] if k in probes["server-x1"]]
    ttft = round(statistics.median(diffs), 2) if diffs else "n/a: probes missing on herd or llama-server"
    # Where herd's TTFT goes: the server's hop (herd's probe - the same request sent straight to
    # the runner's socket, paired by seed) and the runner's time beyond its prompt evaluation.
    rp = {r["seed"]: r for r in run.reqs("herd-x1", "rprobe")}
    hop = [probes["herd-x1"][k] - rp[k]["ttft_ms"] for k in probes.get("herd-x1", {}) if k in rp]
    hop = round(statistics.median(hop), 2) if hop else "n/a: herd-x1 rprobe not measured"
    beyond = [r["ttft_ms"] - r["prompt_ms"] for r in rp.values() if r.get("prompt_ms")]
    beyond = round(statistics.median(beyond), 2) if beyond else "n/a: herd-x1 rprobe not measured"

    def sd_accept(label, phase="gen"):
        rs = run.rounds(label, phase)
        d = sum(r.get("drafted", 0) for r in rs)
        return round(sum(r.get("accepted", 0) for r in rs) / d, 3) if d else (
            run.na(label, phase) or f"n/a: {label}: no drafted/accepted counts (final chunk or /metrics)")

    def sd_gate(label, value):
        acc = sd_accept(label)
        return acc if isinstance(acc, str) else value

    cp_on, cp_off = run.reqs("herd-x1-ngram", "copy"), run.reqs(x1, "copy")
    same = sorted(q["digest"] for q in cp_on) == sorted(q["digest"] for q in cp_off) if cp_on and cp_off else "n/a"
    ff_on, ff_off = run.reqs(x1, "ff20"), run.reqs("herd-x1-ffoff", "ff20")
    ff_same = sorted(q["digest"] for q in ff_on) == sorted(q["digest"] for q in ff_off) if ff_on and ff_off else "n/a"
    m16 = run.mem(x16) or {}
    rt = {
        "x16_over_bb16": ratio(agg(x16, "gen"), bbv(16)),
        "x16_nb2048_over_bb16": ratio(agg("herd-x16-nb2048", "gen"), bbv(16)),
        "x16_nohold_over_bb16": ratio(agg("herd-x16-nohold", "gen"), bbv(16)),
        "x16_hold_over_nohold": ratio(agg(x16, "gen"), agg("herd-x16-nohold", "gen")),
        "x1_over_bb1": ratio(agg(x1, "gen"), bbv(1)),
        "x16_over_bb16_tg256": ratio(agg(x16, "gen"), bbv256(16)),
        "x1_over_bb1_tg256": ratio(agg(x1, "gen"), bbv256(1)),
        "x16_over_server_x16": ratio(agg(x16, "gen"), agg("server-x16", "gen")),
        "x1_over_server_x1": ratio(agg(x1, "gen"), agg("server-x1", "gen")),
        "x16_tok_per_wall_over_server": ratio(run.mean(x16, "gen", "tok_per_wall"), run.mean("server-x16", "gen", "tok_per_wall")),
        "ttft_minus_server_ms": ttft,
        "ttft_server_hop_ms": hop,
        "ttft_runner_beyond_prompt_ms": beyond,
        "fmt_over_free_x1": ratio(med(x1, "fmt"), med(x1, "gen")),
        "fmt_over_free_x16": ratio(med(x16, "fmt"), med(x16, "gen")),
        "fmt_over_free_x16_aggregate": ratio(agg(x16, "fmt"), agg(x16, "gen")),
        # The constrained x16 A/B of the first-token hold (run I: 0.72 with it, 0.93 before it).
        "fmt_over_free_x16_nohold": ratio(med("herd-x16-nohold", "fmt"), med("herd-x16-nohold", "gen")),
        # The same with grammar fast-forward off, and constrained x16 with it on ÷ off.
        "fmt_over_free_x16_ffoff": ratio(med("herd-x16-ffoff", "fmt"), med("herd-x16-ffoff", "gen")),
        "fmt_x16_ff_over_ffoff": ratio(med(x16, "fmt"), med("herd-x16-ffoff", "fmt")),
        "chat_over_generate_x16": ratio(agg(x16, "chat"), agg(x16, "gen")),
        "ff_speedup": ratio(run.req_mean(x1, "ff20", "erate"), run.req_mean("herd-x1-ffoff", "ff20", "erate")),
        "ff_speedup_client": ratio(run.req_mean(x1, "ff20", "crate"), run.req_mean("herd-x1-ffoff", "ff20", "crate")),
        # Byte identity on/off is a CPU guarantee (batch-invariant kernels there); on a GPU a
        # multi-token step rounds differently, so False here is expected, not a failure.
        "ff_output_identical_gpu_informational": ff_same,
        "ngram_speedup": ratio(run.req_mean("herd-x1-ngram", "copy", "erate"), run.req_mean(x1, "copy", "erate")),
        "ngram_speedup_client": ratio(run.req_mean("herd-x1-ngram", "copy", "crate"), run.req_mean(x1, "copy", "crate")),
        "ngram_greedy_identical": same,
        "ngram_sampled_gen_over_free": ratio(agg("herd-x1-ngram", "gen"), agg(x1, "gen")),
        # The copy task on a real model (SmolLM2), which copies where random weights do not.
        "real_ngram_speedup": ratio(run.req_mean("real-x1-ngram", "rcopy", "erate"), run.req_mean("real-x1", "rcopy", "erate")),
        "real_ngram_speedup_client": ratio(run.req_mean("real-x1-ngram", "rcopy", "crate"), run.req_mean("real-x1", "rcopy", "crate")),
        "real_ngram16_speedup": ratio(run.req_mean("real-x1-ngram16", "rcopy", "erate"), run.req_mean("real-x1", "rcopy", "erate")),
        "real_ngram16_onegraph_speedup": ratio(run.req_mean("real-x1-ngram16-onegraph", "rcopy", "erate"),
                                               run.req_mean("real-x1", "rcopy", "erate")),
        "mlx_real_ngram16_speedup": ratio(run.req_mean("mlx-real-x1-ngram16", "rcopy", "erate"),
                                          run.req_mean("mlx-real-x1", "rcopy", "erate")),
        "x16_onegraph_over_bb16": ratio(agg("herd-x16-onegraph", "gen"), bbv(16)),
        "fmt_over_free_x16_onegraph": ratio(med("herd-x16-onegraph", "fmt"), med("herd-x16-onegraph", "gen")),
        "x1_devsamp_over_bb1": ratio(agg("herd-x1-devsamp", "gen"), bbv(1)),
        "x16_nopad_over_bb16": ratio(agg("herd-x16-nopad", "gen"), bbv(16)),
        "fmt_over_free_x16_nopad": ratio(med("herd-x16-nopad", "fmt"), med("herd-x16-nopad", "gen")),
        "x16_t1_over_bb16": ratio(agg("herd-x16-t1", "gen"), bbv(16)),
        "fmt_over_free_x16_t1": ratio(med("herd-x16-t1", "fmt"), med("herd-x16-t1", "gen")),
        "x1_t1_over_bb1": ratio(agg("herd-x1-t1", "gen"), bbv(1)),
        "fmt_over_free_x16_mal": ratio(med("herd-x16-mal", "fmt"), med("herd-x16-mal", "gen")),
        "fmt_over_free_x16_nomal": ratio(med("herd-x16-nomal", "fmt"), med("herd-x16-nomal", "gen")),
        "x16_nomal_over_bb16": ratio(agg("herd-x16-nomal", "gen"), bbv(16)),
        "x16_nopw_over_bb16": ratio(agg("herd-x16-nopw", "gen"), bbv(16)),
        "fmt_over_free_x16_nopw": ratio(med("herd-x16-nopw", "fmt"), med("herd-x16-nopw", "gen")),
        "real_ngram_greedy_identical": (sorted(q["digest"] for q in run.reqs("real-x1-ngram", "rcopy"))
                                        == sorted(q["digest"] for q in run.reqs("real-x1", "rcopy"))
                                        if run.reqs("real-x1-ngram", "rcopy") and run.reqs("real-x1", "rcopy") else "n/a"),
        "mlx_real_ngram_greedy_identical": (sorted(q["digest"] for q in run.reqs("mlx-real-x1-ngram16", "rcopy"))
                                            == sorted(q["digest"] for q in run.reqs("mlx-real-x1", "rcopy"))
                                            if run.reqs("mlx-real-x1-ngram16", "rcopy") and run.reqs("mlx-real-x1", "rcopy")
                                            else "n/a"),
        # Self-draft on the real model (SmolLM2 drafting for itself; phase real).
        "real_sd_acceptance_x1_copy": sd_accept("real-x1-sd", "rcopy"),
        "real_sd_acceptance_x1_gen": sd_accept("real-x1-sd"),
        "real_sd_acceptance_x16_copy": sd_accept("real-x16-sd", "rcopy"),
        "real_sd_over_none_x1_copy": ratio(run.req_mean("real-x1-sd", "rcopy", "erate"), run.req_mean("real-x1", "rcopy", "erate")),
        "real_sd_over_none_x1_gen": ratio(agg("real-x1-sd", "gen"), agg("real-x1", "gen")),
        "real_sd_over_none_x16_copy": ratio(agg("real-x16-sd", "rcopy"), agg("real-x16", "rcopy")),
        "real_sd_over_none_x16_gen": ratio(agg("real-x16-sd", "gen"), agg("real-x16", "gen")),
        "sd_acceptance_x1": sd_accept("herd-x1-sd"),
        "sd_acceptance_x16": sd_accept("herd-x16-sd"),
        # Without drafted counts nothing shows the draft model was used (DRAFT parsed and dropped
        # reads the same as no draft): the rate ratio is then n/a too, not a misleading ~1.0.
        "sd_over_none_x1": sd_gate("herd-x1-sd", ratio(agg("herd-x1-sd", "gen"), agg(x1, "gen"))),
        "sd_over_none_x16": sd_gate("herd-x16-sd", ratio(agg("herd-x16-sd", "gen"), agg(x16, "gen"))),
        "size_vram_over_smi": (round(m16["size_vram_over_smi"], 4) if m16.get("size_vram_over_smi")
                               else f"n/a: size_vram {m16.get('size_vram')}, nvidia-smi runner MiB {m16.get('smi_runner_mib')}"),
    }
    probe_ms = lambda label: (round(statistics.median(r["ttft_ms"] for r in run.reqs(label, "probe")), 1)
                              if run.reqs(label, "probe") else run.na(label, "probe") or f"n/a: {label} probe")
    mlx = {}
    for q in ("int4", "bf16", "int4c", "bf16c"):
        m1, m16 = f"mlx-{q}-x1", f"mlx-{q}-x16"
        rt[f"mlx_{q}_over_q4km_x1"] = ratio(agg(m1, "gen"), agg(x1, "gen"))
        rt[f"mlx_{q}_over_q4km_x16"] = ratio(agg(m16, "gen"), agg(x16, "gen"))
        rt[f"mlx_{q}_ttft_over_q4km_x1"] = ratio(probe_ms(m1), probe_ms(x1))
        rt[f"mlx_{q}_ttft_over_q4km_x16"] = ratio(run.mean(m16, "gen", "ttft_median_ms"), run.mean(x16, "gen", "ttft_median_ms"))
    for label, name in ((x1, "Q4_K_M (runner-llamacpp)"), ("mlx-int4-x1", "MLX int4 (runner-mlx)"),
                        ("mlx-bf16-x1", "MLX bf16 (runner-mlx)"), ("mlx-int4c-x1", "MLX int4, bf16 compute"),
                        ("mlx-bf16c-x1", "MLX bf16, bf16 compute")):
        l16 = label.replace("-x1", "-x16")
        mlx[name] = dict(decode_x1=agg(label, "gen"), decode_x16=agg(l16, "gen"), ttft_probe_x1_ms=probe_ms(label),
                         ttft_x16_ms=run.mean(l16, "gen", "ttft_median_ms"), stream_median_x16=med(l16, "gen"))
    n["mlx_vs_llamacpp"] = mlx
    summary = {"numbers": n, "ratios": rt}
    with open(a.json, "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    print("== ratios (one run; summary.json has every number)")
    for k, v in rt.items():
        print(f"   {k:32s} {v}")
    if any(r.get("label", "").startswith("mlx-") for r in run.recs):
        print("== mlx vs llama.cpp (means of rounds): decode x1 t/s | decode x16 sum t/s | x16 median stream t/s"
              " | TTFT x1 probe median ms | TTFT x16 median ms")
        fmt = lambda v: f"{v:.1f}" if isinstance(v, float) else str(v)
        for name, v in mlx.items():
            print(f"   {name:26s} {fmt(v['decode_x1'])} | {fmt(v['decode_x16'])} | {fmt(v['stream_median_x16'])}"
                  f" | {fmt(v['ttft_probe_x1_ms'])} | {fmt(v['ttft_x16_ms'])}")
    print("== herd phases: label.phase  sum-client t/s per round | median stream | TTFT median ms")
    for k, v in n.items():
        if isinstance(v, dict) and "sum_client_tps" in v:
            extra = f" | drafted {v['drafted']} accepted {v['accepted']}" if v["drafted"] else ""
            if v["json_ok"] is not None:  # the rest ran into num_predict
                extra += f" | JSON complete {v['json_ok']}/{v['requests']}"
            print(f"   {k:28s} {v['sum_client_tps']} | {v['median_stream_tps']} | {v['ttft_median_ms']}{extra}")
        elif isinstance(v, str):
            print(f"   {k:28s} {v}")
    if n["runner_stats"]:
        print("== runner stats by client phase: decode-step ms (means of --step-stats lines) | grammar mask medians")
        for k, v in n["runner_stats"].items():
            st = " ".join(f"{q} {x}" for q, x in v.get("step_ms_mean", {}).items())
            gm = " ".join(f"{q} {x}" for q, x in v.get("grammar_mask_median", {}).items())
            print(f"   {k:28s} {st}{' | ' if st and gm else ''}{gm}")


# Phases that need no other branch's switch: a run where one of them measured nothing is broken.
REQUIRED = ["herd-x1.gen", "herd-x1.probe", "herd-x1.chat", "herd-x1.fmt", "herd-x1.ff20", "herd-x1.copy",
            "herd-x16.gen", "herd-x16.chat", "herd-x16.fmt", "herd-x16-nb2048.gen",
            "server-x1.gen", "server-x1.probe", "server-x16.gen"]


# The mlx phase's labels (the same on the CPU smoke; its "x16" is HB_CONC streams).
REQUIRED_MLX = ["mlx-int4-x1.gen", "mlx-int4-x1.probe", "mlx-int4-x16.gen", "mlx-int4c-x1.gen", "mlx-bf16c-x16.gen",
                "mlx-bf16-x1.gen", "mlx-bf16-x1.probe", "mlx-bf16-x16.gen"]


def check(path, groups):
    s = json.load(open(path))
    n, bad = s["numbers"], []
    need = (REQUIRED if "llama" in groups else []) + (REQUIRED_MLX if "mlx" in groups else [])
    for k in need:
        v = n.get(k)
        if not isinstance(v, dict):
            bad.append(f"{k}: {v}")
        elif v["errors"] or not all(v["tokens"]):
            bad.append(f"{k}: {v['errors']} errors, tokens {v['tokens']}")
    mems = (["herd-x1.mem", "herd-x16.mem"] if "llama" in groups else []) + \
        (["mlx-int4-x1.mem", "mlx-int4-x16.mem", "mlx-bf16-x1.mem", "mlx-bf16-x16.mem"] if "mlx" in groups else [])
    for k in mems:
        if not (n.get(k) or {}).get("size"):
            bad.append(f"{k}: /api/ps gave no size: {n.get(k)}")
    ratios = ["ttft_minus_server_ms", "fmt_over_free_x1", "fmt_over_free_x16", "x1_over_server_x1"] if "llama" in groups else []
    if groups == ["llama", "mlx"]:
        ratios += [f"mlx_{q}_{k}" for q in ("int4", "bf16") for k in ("over_q4km_x1", "over_q4km_x16", "ttft_over_q4km_x1")]
    for k in ratios:
        if isinstance(s["ratios"][k], str):
            bad.append(f"ratio {k}: {s['ratios'][k]}")
    for b in bad:
        print("FAIL", b)
    print("check:", "FAILED" if bad else f"ok ({len(need)} phases, mem, ratios; {','.join(groups)})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
