//! Hostile model files and create requests (issue 22 item 9): GGUF metadata the engine trusts is
//! checked at create and again before a load (400, naming the model), wrongly typed parameters
//! and names with impossible ports are refused at create, and a files map is bounded.
//! Needs `cargo build -p fake-runner` first (the harness's scheduler; no runner is started).

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Map, Value as Json};
use serve_support::*;
use server::gguf::{GgufBuilder, Value};

/// `GgufBuilder::tiny_llama` (2 tokens, 8-wide embeddings) with `set` keys replaced or added.
fn lying_gguf(set: &[(&str, Value)]) -> Vec<u8> {
    let mut b = GgufBuilder::new();
    let base: Vec<(&str, Value)> = vec![
        ("general.architecture", "llama".into()),
        ("general.file_type", 0u32.into()),
        ("llama.context_length", 4096u32.into()),
        ("llama.embedding_length", 8u32.into()),
        ("llama.block_count", 1u32.into()),
        ("llama.attention.head_count", 2u32.into()),
        ("tokenizer.ggml.model", "gpt2".into()),
        ("tokenizer.ggml.tokens", vec!["a", "b"].into()),
    ];
    for (k, v) in &base {
        let v = set.iter().find(|(s, _)| s == k).map_or(v, |(_, v)| v);
        b = b.kv(k, v.clone());
    }
    for (k, v) in set
        .iter()
        .filter(|(k, _)| !base.iter().any(|(b, _)| b == k))
    {
        b = b.kv(k, v.clone());
    }
    b.zeros_f32("token_embd.weight", &[8, 2])
        .zeros_f32("output_norm.weight", &[8])
        .build()
        .unwrap()
}

/// (what, keys to set, why the file is refused).
type Case = (&'static str, Vec<(&'static str, Value)>, &'static str);

fn cases() -> Vec<Case> {
    vec![
        (
            "bos 2^31-1",
            vec![("tokenizer.ggml.bos_token_id", Value::U32(i32::MAX as u32))],
            "tokenizer.ggml.bos_token_id is 2147483647, outside the vocabulary of 2",
        ),
        (
            "context 0",
            vec![("llama.context_length", Value::U32(0))],
            "llama.context_length must be between 1 and 2^32-1",
        ),
        (
            "vocab 2^32-1",
            vec![("llama.vocab_size", Value::U32(u32::MAX))],
            "llama.vocab_size must be between 1 and 2^31-1",
        ),
    ]
}

#[tokio::test]
async fn create_refuses_metadata_the_engine_would_trust() {
    let h = Harness::new();
    for (what, set, why) in cases() {
        let d = h.ts.blob(&lying_gguf(&set));
        let r = h
            .post(
                "/api/create",
                json!({"model": "liar", "files": {"model.gguf": d}, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{what}: {}", r.text());
        assert_eq!(
            r.json()["error"],
            format!("invalid GGUF: file \"model.gguf\": {why}"),
            "{what}"
        );
        assert!(!h.ts.manifest_path("liar", "latest").exists(), "{what}");
    }
    // The same file without the lie is accepted.
    let d = h.ts.blob(&lying_gguf(&[]));
    let r = h
        .post(
            "/api/create",
            json!({"model": "honest", "files": {"model.gguf": d}, "stream": false}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

#[tokio::test]
async fn a_stored_lying_model_is_refused_before_load_naming_the_model() {
    let h = Harness::new();
    for (what, set, why) in cases() {
        h.ts.model("liar", "latest", &lying_gguf(&set), &[], ago(60));
        let r = h
            .post(
                "/api/generate",
                json!({"model": "liar", "prompt": "hi", "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{what}: {}", r.text());
        let err = r.json()["error"].as_str().unwrap().to_owned();
        assert_eq!(
            err,
            format!("invalid GGUF: model liar:latest: {why}"),
            "{what}"
        );
        assert!(!err.contains("blobs"), "no server path: {err}");
    }
}

#[tokio::test]
async fn create_refuses_wrongly_typed_parameters() {
    let h = Harness::new();
    let d = h.ts.blob(&lying_gguf(&[]));
    for (params, want) in [
        (
            json!({"num_ctx": "lots"}),
            "option \"num_ctx\" must be of type integer",
        ),
        (
            json!({"temperature": "hot"}),
            "option \"temperature\" must be of type float32",
        ),
        (
            json!({"stop": [1]}),
            "option \"stop\" must be of an array of strings",
        ),
    ] {
        let r = h
            .post(
                "/api/create",
                json!({"model": "m", "files": {"model.gguf": d}, "parameters": params, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{params}: {}", r.text());
        assert_eq!(r.json()["error"], want, "{params}");
        assert!(!h.ts.manifest_path("m", "latest").exists());
    }
}

#[tokio::test]
async fn create_refuses_a_host_with_an_impossible_port() {
    let h = Harness::new();
    let d = h.ts.blob(&lying_gguf(&[]));
    for name in ["host:99999/a/b:c", "host:1:2/a/b", "host:x/a/b"] {
        let r = h
            .post(
                "/api/create",
                json!({"model": name, "files": {"model.gguf": d}, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{name}: {}", r.text());
        assert_eq!(r.json()["error"], "invalid model name", "{name}");
    }
}

#[tokio::test]
async fn a_huge_files_map_is_refused_at_once() {
    let h = Harness::new();
    let d = h.ts.blob(&lying_gguf(&[]));
    let files: Map<String, Json> = (0..10_000)
        .map(|i| (format!("shard-{i:05}.gguf"), Json::String(d.clone())))
        .collect();
    let started = std::time::Instant::now();
    let r = h
        .post(
            "/api/create",
            json!({"model": "many", "files": files, "stream": false}),
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert_eq!(
        r.json()["error"],
        "too many files (10000); at most 1024 per create"
    );
    // Before the bound this create read 10k headers (18 s, 450 MB kept).
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
}
