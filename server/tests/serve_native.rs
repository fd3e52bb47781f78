//! End to end with the real runner (runner-llamacpp) and the real test models registered in a
//! temp Ollama-layout store: greedy + seeded generation is byte-identical across requests and
//! across a runner restart; multi-turn chat on SmolLM2 renders through its GGUF Jinja template
//! and, identically, through a Go TEMPLATE layer; gemma3 embeddings are unit vectors of its
//! embedding width; keep_alive 0 unloads (the runner process is gone).
//!
//! Needs `cargo build -p runner-llamacpp` and `scripts/fetch-test-models`; without them each test
//! prints why and skips. One inference thread throughout (a shared 2-core box).

mod serve_support;

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const GEMMA: &str = "gemma-3-270m-q4_k_m.gguf";
const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// A harness on the real runner with `models` registered, or `None` (skip) when the runner or a
/// model file is missing.
/// `(name, model file, extra layers)`.
type Registration<'a> = (&'a str, &'a str, &'a [(&'a str, &'a [u8])]);

fn native(models: &[Registration<'_>]) -> Option<Harness> {
    let runner = native_runner()?;
    let h = Harness::with_runner(
        runner,
        |c| c.load_timeout = Some(Duration::from_secs(120)),
        Default::default(),
    );
    for (name, file, extra) in models {
        let path = test_model(file)?;
        register_file(&h.ts, name, &path, extra);
    }
    Some(h)
}

fn greedy(n: u32) -> Value {
    json!({"temperature": 0, "seed": 42, "num_predict": n, "num_thread": 1})
}

#[tokio::test]
async fn gemma_greedy_generation_is_reproducible_across_requests_and_restarts() {
    let Some(h) = native(&[("gemma", GEMMA, &[])]) else {
        return;
    };
    let body = json!({"model": "gemma", "prompt": "The capital of France is", "stream": false,
                      "options": greedy(12)});
    let first = h.post("/api/generate", body.clone()).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    let first = first.json();
    let text = first["response"].as_str().unwrap().to_owned();
    assert!(!text.is_empty());
    assert_eq!(first["done_reason"], "length");
    assert_eq!(first["eval_count"], 12);
    assert!(!first["context"].as_array().unwrap().is_empty());
    for _ in 0..4 {
        let again = h.post("/api/generate", body.clone()).await.json();
        assert_eq!(again["response"], text, "byte-identical");
    }
    // Streamed, the chunks concatenate to the same text.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = h.post("/api/generate", streamed).await;
    assert_eq!(r.headers["content-type"], "application/x-ndjson");
    let ls = lines(&r);
    let joined: String = ls.iter().map(|c| c["response"].as_str().unwrap()).collect();
    assert_eq!(joined, text);

    // keep_alive 0 unloads: the runner process is gone; the next request loads a new one.
    let pid = h.runner_pid().await;
    let r = h
        .post("/api/generate", json!({"model": "gemma", "keep_alive": 0}))
        .await;
    assert_eq!(r.json()["done_reason"], "unload");
    assert!(
        scheduler_support::wait_gone(pid, Duration::from_secs(10)).await,
        "runner exited"
    );
    assert!(h.ps().await.is_empty());
    let after = h.post("/api/generate", body).await.json();
    assert_ne!(h.runner_pid().await, pid);
    assert_eq!(after["response"], text, "identical after a runner restart");
}

/// A chatml Go template equivalent to SmolLM2's Jinja one when a system message is given.
const CHATML_GO: &[u8] = b"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n";

#[tokio::test]
async fn smollm2_multi_turn_chat_through_jinja_and_go_templates() {
    let Some(h) = native(&[
        ("smol", SMOL, &[]),
        ("smolgo", SMOL, &[(MT_TEMPLATE, CHATML_GO)]),
    ]) else {
        return;
    };
    let messages = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."},
        {"role": "assistant", "content": "Blue."},
        {"role": "user", "content": "Another one?"}
    ]);
    let expected = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nName a colour.<|im_end|>\n\
                    <|im_start|>assistant\nBlue.<|im_end|>\n<|im_start|>user\nAnother one?<|im_end|>\n\
                    <|im_start|>assistant\n";
    for model in ["smol", "smolgo"] {
        let r = h
            .post(
                "/api/chat",
                json!({"model": model, "messages": messages, "_debug_render_only": true}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        // One JSON object, though `stream` defaults to true (Ollama's c.JSON).
        assert_eq!(lines(&r).len(), 1, "{}", r.text());
        assert_eq!(r.json()["done"], false, "{}", r.text());
        let rendered = r.json()["_debug_info"]["rendered_template"].clone();
        assert_eq!(rendered, expected, "{model}");
    }
    // Without a system message the Jinja template adds SmolLM2's default one.
    let r = h
        .post(
            "/api/chat",
            json!({"model": "smol", "stream": false, "_debug_render_only": true,
                                  "messages": [{"role": "user", "content": "Hi"}]}),
        )
        .await;
    let rendered = r.json()["_debug_info"]["rendered_template"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        rendered.starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"),
        "{rendered}"
    );

    let mut replies = Vec::new();
    for model in ["smol", "smolgo"] {
        let r = h
            .post(
                "/api/chat",
                json!({"model": model, "messages": messages, "stream": false,
                                      "options": greedy(8)}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let b = r.json();
        assert_eq!(b["message"]["role"], "assistant");
        // The second model's prompt is a cache hit on the shared runner: only the first
        // evaluates the whole conversation.
        if model == "smol" {
            assert!(b["prompt_eval_count"].as_u64().unwrap() > 20, "{b}");
        }
        replies.push(b["message"]["content"].as_str().unwrap().to_owned());
    }
    assert!(!replies[0].is_empty());
    assert_eq!(
        replies[0], replies[1],
        "same prompt, same greedy reply through either template"
    );
    // Two names on one blob with equal options share one runner.
    assert_eq!(h.ps().await.len(), 1);
}

#[tokio::test]
async fn gemma_embeddings_are_unit_vectors_of_its_width() {
    let Some(h) = native(&[("gemma", GEMMA, &[])]) else {
        return;
    };
    let r = h
        .post(
            "/api/embed",
            json!({"model": "gemma", "input": ["hello world", "a cat sat"],
                                   "options": {"num_thread": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let b = r.json();
    let e = b["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 2);
    for v in e {
        let v: Vec<f64> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(v.len(), 640);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    assert_ne!(e[0], e[1]);
    assert!(b["prompt_eval_count"].as_u64().unwrap() >= 4);
    let ps = h.ps().await;
    assert_eq!(ps[0]["name"], "gemma:latest");
    assert!(ps[0]["size"].as_u64().unwrap() > 200_000_000);
    assert_eq!(ps[0]["details"]["family"], "gemma3");
    assert_eq!(ps[0]["context_length"], 4096);
}

/// Logprobs as Ollama reports them (its `assertBytesMatchToken` check): each entry's `bytes`
/// are its `token`'s own bytes, also for tokens that hold part of a character (an emoji's
/// first bytes read as an empty token, a lone continuation byte as U+FFFD); and
/// `top_logprobs` without `logprobs` asks for none.
#[tokio::test]
async fn logprob_bytes_are_the_token_text_and_come_only_with_logprobs() {
    let Some(h) = native(&[("smol", SMOL, &[])]) else {
        return;
    };
    let body = json!({"model": "smol", "stream": false, "logprobs": true, "top_logprobs": 3,
        "messages": [{"role": "user", "content": "Output some smily face emoji"}],
        "options": {"temperature": 0, "seed": 123, "num_predict": 5, "num_thread": 1}});
    let r = h.post("/api/chat", body).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = r.json();
    let mut entries = Vec::new();
    for lp in r["logprobs"].as_array().unwrap() {
        entries.push(lp.clone());
        entries.extend(lp["top_logprobs"].as_array().unwrap().iter().cloned());
    }
    let mut partial = 0;
    for e in &entries {
        let token = e["token"].as_str().unwrap();
        let bytes: Vec<u8> = e
            .get("bytes")
            .map(|b| serde_json::from_value(b.clone()).unwrap())
            .unwrap_or_default();
        assert_eq!(bytes, token.as_bytes(), "{e}");
        partial += usize::from(token.is_empty() || token.contains('\u{FFFD}'));
    }
    assert!(partial > 0, "no token held part of a character: {r}");

    let body = json!({"model": "smol", "prompt": "hi", "stream": false, "top_logprobs": 3,
        "options": {"num_predict": 3, "num_thread": 1}});
    let r = h.post("/api/generate", body).await.json();
    assert!(r.get("logprobs").is_none(), "{r}");
}
