//! Unbounded prompts from one request (issue 22 item 6), on the real `herd serve` with SmolLM2:
//! a 100k-message chat does not hold up a 2-token request to the same model, and a 50 MB prompt
//! or a `context` of 200k token ids answers within a bound of a normal full-context request
//! (truncated to `num_ctx` as Ollama's runner does), or 400 at once with `truncate: false`.
//! Needs `cargo build -p runner-llamacpp` and `scripts/fetch-test-models`.

mod herd_proc;
mod serve_support;

use std::time::{Duration, Instant};

use herd_proc::HerdServe;
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const NUM_CTX: u64 = 512;

fn start() -> Option<(TestStore, HerdServe)> {
    let runner = native_runner()?;
    let model = test_model(SMOL)?;
    let ts = TestStore::new();
    register_file(&ts, "smol", &model, &[]);
    let runner = runner.display().to_string();
    let herd = HerdServe::start(
        ts.root(),
        &[
            ("HERD_RUNNER", runner.as_str()),
            ("OLLAMA_NUM_PARALLEL", "2"),
        ],
    );
    Some((ts, herd))
}

fn options(num_predict: u64) -> Value {
    json!({"num_ctx": NUM_CTX, "num_predict": num_predict, "temperature": 0, "seed": 1})
}

/// Posts `body` and times the exchange (the body is serialized before the clock starts).
async fn post(http: &reqwest::Client, url: String, body: Value) -> (u16, Value, Duration) {
    let body = serde_json::to_vec(&body).unwrap();
    let t = Instant::now();
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    let v = serde_json::from_str(&text).unwrap_or_else(|_| json!({"raw": text}));
    (status, v, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_chat_does_not_hold_up_a_tiny_request() {
    let Some((_ts, herd)) = start() else {
        return;
    };
    let http = reqwest::Client::new();
    // Load the model first: both requests below find it ready.
    let (s, v, _) = post(
        &http,
        herd.url("/api/generate"),
        json!({"model": "smol", "prompt": "Hi", "stream": false, "options": options(1)}),
    )
    .await;
    assert_eq!(s, 200, "{v}");

    let messages: Vec<Value> = (0..100_000)
        .map(|i| {
            let role = if i % 2 == 0 { "user" } else { "assistant" };
            json!({"role": role, "content": format!("word{i}")})
        })
        .collect();
    let big_body =
        json!({"model": "smol", "messages": messages, "stream": false, "options": options(1)});
    let started = Instant::now();
    let big = tokio::spawn({
        let (http, url) = (http.clone(), herd.url("/api/chat"));
        async move {
            let r = post(&http, url, big_body).await;
            (r, started.elapsed())
        }
    });
    // The big request is being read and rendered by now.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (s, v, tiny_took) = post(
        &http,
        herd.url("/api/generate"),
        json!({"model": "smol", "prompt": "Hi", "stream": false, "options": options(2)}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let tiny_done = started.elapsed();
    let ((s, v, _), big_done) = big.await.unwrap();
    eprintln!("tiny request took {tiny_took:?} (done at {tiny_done:?}); 100k-message chat done at {big_done:?}");
    assert_eq!(s, 200, "{v}");
    assert!(
        v["prompt_eval_count"].as_u64().unwrap() <= NUM_CTX,
        "truncated to num_ctx: {v}"
    );
    // The newest message is the one kept.
    assert!(tiny_done < big_done, "the tiny request finished first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_prompts_and_contexts_answer_within_a_bound_of_a_normal_request() {
    let Some((_ts, herd)) = start() else {
        return;
    };
    let http = reqwest::Client::new();
    let gen = |prompt: &str, extra: Value| {
        let mut b =
            json!({"model": "smol", "prompt": prompt, "stream": false, "options": options(1)});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let (s, v, _) = post(&http, herd.url("/api/generate"), gen("Hi", json!({}))).await;
    assert_eq!(s, 200, "{v}");
    // The yardstick: a prompt already over num_ctx (the runner truncates it) — a full prefill.
    let normal_prompt = "word ".repeat(4 * NUM_CTX as usize);
    let (s, v, normal) = post(
        &http,
        herd.url("/api/generate"),
        gen(&normal_prompt, json!({})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let full = v["prompt_eval_count"].as_u64().unwrap();
    assert!(full <= NUM_CTX && full > NUM_CTX / 2, "{v}");
    let bound = normal * 4 + Duration::from_secs(3);

    let huge = "word ".repeat(10 << 20); // 50 MiB
    let (s, v, took) = post(&http, herd.url("/api/generate"), gen(&huge, json!({}))).await;
    eprintln!("normal full-context request {normal:?}; 50 MB prompt {took:?}");
    assert_eq!(s, 200, "{v}");
    assert!(v["prompt_eval_count"].as_u64().unwrap() <= NUM_CTX, "{v}");
    assert!(took < bound, "50 MB prompt took {took:?} (bound {bound:?})");

    let context: Vec<u64> = (0..200_000).map(|i| 1000 + (i % 500)).collect();
    let (s, v, took) = post(
        &http,
        herd.url("/api/generate"),
        gen("Hi", json!({"context": context})),
    )
    .await;
    eprintln!("context of 200k ids {took:?}");
    assert_eq!(s, 200, "{v}");
    assert!(v["prompt_eval_count"].as_u64().unwrap() <= NUM_CTX, "{v}");
    assert!(took < bound, "200k context took {took:?} (bound {bound:?})");

    // Without truncation both are refused at once with a 400 that says why.
    for (what, body) in [
        ("prompt", gen(&huge, json!({"truncate": false}))),
        (
            "context",
            gen("Hi", json!({"context": context, "truncate": false})),
        ),
    ] {
        let (s, v, took) = post(&http, herd.url("/api/generate"), body).await;
        eprintln!("truncate:false {what}: {s} {v} in {took:?}");
        assert_eq!(s, 400, "{what}: {v}");
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("exceed_context_size_error"),
            "{what}: {v}"
        );
        assert!(took < bound, "{what} took {took:?}");
    }
    // The server still answers normally.
    let (s, v, _) = post(&http, herd.url("/api/generate"), gen("Hi", json!({}))).await;
    assert_eq!(s, 200, "{v}");
}
