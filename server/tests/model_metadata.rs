//! Hostile model files and create requests (issue 22 item 9): GGUF metadata the engine trusts is
//! checked at create and again before a load (400, naming the model), wrongly typed parameters
//! are refused at create, and a files map is bounded. Hosts that are no address (`host:https`)
//! are valid names as in Ollama; only a pull of one is refused.
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

/// A host is a name part as Ollama's ParseName reads it (`host:https`, `host:99999`: `:` anywhere
/// after the first character) and any scheme before it is accepted (types/model/name_test.go):
/// such names create, show and list. Only registry traffic needs an address and a scheme it
/// can speak, so a pull of one is refused at once, before any network.
#[tokio::test]
async fn hosts_and_schemes_are_names_as_in_ollama() {
    let h = Harness::new();
    let d = h.ts.blob(&lying_gguf(&[]));
    // (name as written, its manifest path under manifests/)
    let cases = [
        (
            "host:https/namespace/model:tag",
            "host:https/namespace/model/tag",
        ),
        ("host:99999/a/b:c", "host:99999/a/b/c"),
        ("scheme://host:port/ns/m", "host:port/ns/m/latest"),
    ];
    for (name, path) in cases {
        let r = h
            .post(
                "/api/create",
                json!({"model": name, "files": {"model.gguf": d}, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{name}: {}", r.text());
        assert!(h.ts.root().join("manifests").join(path).is_file(), "{name}");
        let shown = h.post("/api/show", json!({"model": name})).await;
        assert_eq!(shown.status, StatusCode::OK, "{name}: {}", shown.text());
    }
    let tags = get(&h.app, "/api/tags").await.json();
    let mut listed: Vec<&str> = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        [
            "host:99999/a/b:c",
            "host:https/namespace/model:tag",
            "host:port/ns/m:latest"
        ]
    );
    // (name, error) for a pull: no address, or a scheme no registry speaks (500, as every
    // failed pull without streaming: Ollama's waitForStream).
    let refused = [
        ("host:https/namespace/model:tag", "invalid model name"),
        (
            "ftp://registry.example/ns/m",
            "unsupported protocol scheme \"ftp\"",
        ),
    ];
    for (name, want) in refused {
        let r = h
            .post("/api/pull", json!({"model": name, "stream": false}))
            .await;
        assert_eq!(
            r.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{name}: {}",
            r.text()
        );
        assert_eq!(r.json()["error"], want, "{name}");
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
