//! The cost of a format, CPU, one thread (`scripts/bench format`; ignored by default):
//!
//!   cargo test -p server --release --test format_bench -- --ignored --nocapture
//!
//! 1. runner-llamacpp with gemma-3-270m, greedy, on its socket: decode tok/s with a JSON schema
//!    ÷ without (the free request generates as many tokens as the constrained one did), and the
//!    per-token mask time p50/p99 from the runner's own "grammar mask:" lines.
//! 2. think+format through herd with SmolLM2-135M and a thinking TEMPLATE (as format_native.rs):
//!    prompt tokens evaluated with a format ÷ without (1.00 = one prefill per request), and time
//!    to the first streamed token with a format ÷ without. Every request's prompt is unique from
//!    its first words, so neither side reuses the other's prompt cache.
//!
//! `HERD_BENCH_N` sets the number of pairs per part (default 7). Needs the release runner
//! (`cargo build --release -p runner-llamacpp`) and `scripts/fetch-test-models`.

mod serve_support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use runner_protocol::{
    CompletionChunk, CompletionRequest, Constraint, LoadOptions, Prompt, Sampling, Timings,
};
use serde_json::{json, Value};
use serve_support::*;
use server::runner::{Runner, SpawnConfig};

const THINKING_GO: &[u8] = b"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ if .Thinking }}Thoughts:{{ .Thinking }}.{{ end }}{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\nThoughts:";

const GEMMA_PROMPTS: &[&str] = &[
    "A list of fruits and their colours, as JSON:",
    "The planets of the solar system, with one fact each:",
    "Cities of Europe and their populations:",
    "Three famous painters and their best-known works:",
    "Animals of the savanna and what they eat:",
];

fn pairs() -> usize {
    std::env::var("HERD_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn run(runner: &Runner, req: &CompletionRequest) -> Timings {
    let mut s = runner.completion(req).await.unwrap();
    while let Some(c) = s.next().await {
        if let CompletionChunk::Done { timings, .. } = c.unwrap() {
            return timings;
        }
    }
    panic!("no final chunk");
}

fn tps(t: &Timings) -> f64 {
    f64::from(t.eval_count) / (t.eval_duration_ns as f64 / 1e9)
}

/// `(p50, p99, llguidance p99)` µs of each "grammar mask:" line in the runner's output.
fn mask_lines(tail: &str) -> Vec<(f64, f64, f64)> {
    tail.lines()
        .filter(|l| l.contains("grammar mask:"))
        .map(|l| {
            let field = |k: &str| -> f64 {
                let s = &l[l.find(k).unwrap() + k.len()..];
                s.split_whitespace().next().unwrap().parse().unwrap()
            };
            (
                field(" p50_us="),
                field(" p99_us="),
                field("engine_p99_us="),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn format_cost() {
    let binary = native_runner().expect("cargo build -p runner-llamacpp first");
    let gemma = test_model("gemma-3-270m-q4_k_m.gguf").expect("scripts/fetch-test-models");
    let smol = test_model("SmolLM2-135M-Instruct.Q4_1.gguf").expect("scripts/fetch-test-models");
    let n = pairs();

    // ---- 1. decode and mask cost on the runner socket ------------------------------------
    let dir = server::runner::create_runner_dir().unwrap();
    let mut cfg = SpawnConfig::new(&binary, dir.path());
    cfg.load_timeout = Some(Duration::from_secs(120));
    let load = LoadOptions {
        model: gemma,
        ctx_size: 1024,
        threads: 1,
        ..LoadOptions::default()
    };
    let runner = Runner::start(&cfg, "gemma", load).await.unwrap();
    let schema = json!({
        "type": "object",
        "properties": {"items": {"type": "array", "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "note": {"type": "string"}},
            "required": ["name", "note"]}}},
        "required": ["items"]
    });
    let greedy = |prompt: &str, n: i32, c: Option<Constraint>| CompletionRequest {
        prompt: Prompt::Text(prompt.into()),
        num_predict: n,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        cache_prompt: false,
        constraint: c,
        ..CompletionRequest::default()
    };
    // Warm-up (not measured): the first request with a schema compiles its grammar, which is
    // then cached for the process.
    let c = Constraint::JsonSchema {
        schema: schema.clone(),
        thinking_close: vec![],
    };
    run(&runner, &greedy(GEMMA_PROMPTS[0], 16, Some(c))).await;
    let (mut ratios, mut tok) = (Vec::new(), 0);
    for i in 0..n {
        let p = GEMMA_PROMPTS[i % GEMMA_PROMPTS.len()];
        let c = Constraint::JsonSchema {
            schema: schema.clone(),
            thinking_close: vec![],
        };
        let constrained = run(&runner, &greedy(p, 128, Some(c))).await;
        let free = run(&runner, &greedy(p, constrained.eval_count as i32, None)).await;
        tok += constrained.eval_count;
        ratios.push(tps(&constrained) / tps(&free));
    }
    // The last request's line follows its final chunk.
    let mut masks = mask_lines(&runner.output_tail());
    for _ in 0..100 {
        if masks.len() > n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        masks = mask_lines(&runner.output_tail());
    }
    let masks = &masks[masks.len().saturating_sub(n)..];
    runner.stop().await;
    println!("gemma-3-270m, CPU, 1 thread, greedy; {n} prompts, {tok} constrained tokens");
    println!(
        "decode tok/s constrained ÷ free: {:.3} (median of {n} pairs; goal >= 0.97)",
        median(ratios)
    );
    println!(
        "mask per token on the decode thread (wait + write): p50 {:.1} µs, p99 {:.1} µs (median request; goal p99 <= 100); worst request p99 {:.1} µs",
        median(masks.iter().map(|m| m.0).collect()),
        median(masks.iter().map(|m| m.1).collect()),
        masks.iter().map(|m| m.1).fold(0.0, f64::max)
    );
    println!(
        "mask p99 inside llguidance (on the mask thread, overlapped with decode): {:.1} µs (median request)",
        median(masks.iter().map(|m| m.2).collect())
    );

    // ---- 2. think+format through herd ----------------------------------------------------
    let h = Harness::with_runner(
        binary,
        |c| c.load_timeout = Some(Duration::from_secs(120)),
        Default::default(),
    );
    register_file(&h.ts, "smolthink", &smol, &[(MT_TEMPLATE, THINKING_GO)]);
    let schema = json!({
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 16}, "sure": {"type": "boolean"}},
        "required": ["colour", "sure"],
        "additionalProperties": false
    });
    let opts = json!({"temperature": 0, "num_predict": 48, "num_thread": 1});
    // (time to the first streamed token, final chunk)
    let chat = |i: usize, format: bool| {
        let mut body = json!({"model": "smolthink", "stream": true, "options": opts,
            "messages": [{"role": "user",
                          "content": format!("{i:03} What colour is the sky? Think first.")}]});
        if format {
            body["format"] = schema.clone();
        }
        let h = &h;
        async move {
            let t = Instant::now();
            let resp = h.open("/api/chat", body).await;
            let mut b = resp.into_body();
            let (mut buf, mut ttft, mut last) = (String::new(), None, Value::Null);
            while let Some(ls) = next_lines(&mut b, &mut buf).await {
                for l in ls {
                    let v: Value = serde_json::from_str(&l).unwrap();
                    let m = &v["message"];
                    if ttft.is_none() && (m["thinking"] != "" || m["content"] != "") {
                        ttft = Some(t.elapsed().as_secs_f64() * 1e3);
                    }
                    last = v;
                }
            }
            assert_eq!(last["done"], true, "{last}");
            (ttft.expect("a token"), last)
        }
    };
    chat(999, false).await; // loads the model
    let cold = chat(998, true).await.0; // compiles the schema's grammar (cached afterwards)
    let (mut ttft_ratio, mut prefill_ratio) = (Vec::new(), Vec::new());
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..n {
        // Alternate which goes first, so neither always meets a warmer machine.
        let (a, b) = if i % 2 == 0 {
            let a = chat(2 * i, true).await;
            (a, chat(2 * i + 1, false).await)
        } else {
            let b = chat(2 * i + 1, false).await;
            (chat(2 * i, true).await, b)
        };
        with.push(a.0);
        without.push(b.0);
        ttft_ratio.push(a.0 / b.0);
        let count = |v: &Value| v["prompt_eval_count"].as_f64().unwrap();
        prefill_ratio.push(count(&a.1) / count(&b.1));
    }
    println!(
        "think+format through herd: SmolLM2-135M + thinking TEMPLATE, CPU, 1 thread; {n} pairs"
    );
    println!(
        "prefills per request (prompt tokens evaluated with format ÷ without): {:.2} (goal 1)",
        median(prefill_ratio)
    );
    println!(
        "TTFT with format {:.1} ms, without {:.1} ms; ratio {:.3} (median of pairs; goal <= 1.02)",
        median(with),
        median(without),
        median(ttft_ratio)
    );
    println!("TTFT of the first request with this schema (grammar compile): {cold:.1} ms");
}
