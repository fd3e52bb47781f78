//! Control-plane overhead: time to first token through herd (HTTP over TCP → handler → scheduler
//! → runner socket → NDJSON back) minus time to first token talking to the same runner's socket
//! directly, in interleaved pairs. Ignored by default; run with
//!
//!   cargo test -p server --release --test serve_bench -- --ignored --nocapture
//!
//! `HERD_BENCH_NATIVE=1` uses runner-llamacpp with SmolLM2 (one thread, greedy, one token);
//! otherwise the fake runner. `HERD_BENCH_N` sets the number of pairs (default 200).

mod serve_support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use runner_protocol::{CompletionRequest, Prompt, Sampling};
use serde_json::json;
use serve_support::*;
use server::runner::RunnerClient;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(name: &str, mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&v, 0.5), percentile(&v, 0.99));
    println!(
        "{name:<24} p50 {p50:>8.3} ms   p99 {p99:>8.3} ms   (n={})",
        v.len()
    );
    (p50, p99)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark; run explicitly"]
async fn control_plane_overhead() {
    let native = std::env::var_os("HERD_BENCH_NATIVE").is_some();
    let n: usize = std::env::var("HERD_BENCH_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let h = if native {
        let runner = native_runner().expect("cargo build -p runner-llamacpp first");
        let h = Harness::with_runner(runner, |_| {}, Default::default());
        let model =
            test_model("SmolLM2-135M-Instruct.Q4_1.gguf").expect("scripts/fetch-test-models");
        register_file(&h.ts, "bench", &model, &[]);
        h
    } else {
        let h = Harness::new();
        h.fake("bench", &["--tokens", "x"], &[]);
        h
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = h.app.clone();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/api/generate");
    let body = json!({"model": "bench", "prompt": "Hi", "raw": true,
                      "options": {"num_predict": 1, "temperature": 0, "num_thread": 1}});

    let herd_ttft = || async {
        let t = Instant::now();
        let resp = http.post(&url).json(&body).send().await.unwrap();
        assert!(resp.status().is_success());
        let mut s = resp.bytes_stream();
        s.next().await.unwrap().unwrap();
        let ttft = t.elapsed();
        while s.next().await.is_some() {}
        ttft
    };
    herd_ttft().await; // loads the runner
    let socket = std::fs::read_dir(h.runner_dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "sock"))
        .expect("runner socket");
    let direct = RunnerClient::new(socket);
    let creq = CompletionRequest {
        prompt: Prompt::Text("Hi".into()),
        num_predict: 1,
        sampling: Sampling {
            temperature: 0.0,
            ..Sampling::default()
        },
        ..CompletionRequest::default()
    };
    let direct_ttft = || async {
        let t = Instant::now();
        let mut s = direct.completion(&creq).await.unwrap();
        s.next().await.unwrap().unwrap();
        let ttft = t.elapsed();
        while s.next().await.is_some() {}
        ttft
    };
    for _ in 0..10 {
        herd_ttft().await;
        direct_ttft().await;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (mut via, mut raw, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let a = herd_ttft().await;
        let b = direct_ttft().await;
        via.push(ms(a));
        raw.push(ms(b));
        diff.push(ms(a) - ms(b));
    }
    println!(
        "runner: {}",
        if native {
            "runner-llamacpp + SmolLM2-135M"
        } else {
            "fake-runner"
        }
    );
    report("TTFT through herd", via);
    report("TTFT runner socket", raw);
    let (p50, p99) = report("overhead (pairwise)", diff);
    assert!(p50.is_finite() && p99.is_finite());
}
