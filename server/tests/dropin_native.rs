//! Drop-in behaviours that need the real server and runner (issue 21): the production router on
//! runner-llamacpp with SmolLM2 registered in a temp Ollama-layout store.
//!
//! - Embeddings on a generation model come from the runner already loaded for generation, as
//!   Ollama's runners served both from one context (`server/routes.go` `EmbedHandler` schedules
//!   with no extra capability and the same load options): generate, embed, generate is one load
//!   in `/api/ps` and `/metrics`, one runner process throughout, and the vectors equal those of
//!   a fresh embed-only load. `/v1/embeddings` writes the very float32 numbers `/api/embed` does
//!   (Ollama encodes both from `[]float32`).
//! - `/api/ps` names a loaded model by the name it was loaded with, also when a copy shares its
//!   manifest (prepared models were cached by manifest digest alone and kept the first name).

mod serve_support;

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

fn smol() -> Option<Harness> {
    // One inference thread from the model's params, so requests without options (the OpenAI
    // layer's) load exactly as those with: any reload would come from the endpoint alone.
    smol_harness(&[(MT_PARAMS, br#"{"num_thread": 1}"#)])
}

fn opts() -> Value {
    json!({"temperature": 0, "seed": 7, "num_predict": 6})
}

async fn ok(h: &Harness, uri: &str, body: Value) -> Value {
    let r = h.post(uri, body).await;
    assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.text());
    r.json()
}

/// `herd_model_load_seconds_count` for smol: how many times a runner was loaded for it.
async fn loads(h: &Harness) -> u64 {
    let text = get(&h.app, "/metrics").await.text();
    text.lines()
        .find_map(|l| l.strip_prefix(r#"herd_model_load_seconds_count{model="smol:latest"} "#))
        .map_or(0, |n| n.trim().parse().unwrap())
}

fn vectors(b: &Value) -> Vec<Vec<f64>> {
    b["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn embed_on_a_generation_model_reuses_its_runner() {
    let Some(h) = smol() else { return };
    let gen = json!({"model": "smol", "prompt": "The sky is", "stream": false, "options": opts()});
    let embed = json!({"model": "smol", "input": ["hello world", "a cat sat"], "options": opts()});

    let first = ok(&h, "/api/generate", gen.clone()).await;
    let pid = h.runner_pid().await;
    assert_eq!(loads(&h).await, 1);

    let e = ok(&h, "/api/embed", embed.clone()).await;
    let warm = vectors(&e);
    assert_eq!(warm.len(), 2);
    // SmolLM2-135M's hidden width; unit vectors after Ollama's normalization.
    for v in &warm {
        assert_eq!(v.len(), 576);
        let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "norm {norm}");
    }
    assert_ne!(warm[0], warm[1]);
    assert_eq!(h.runner_pid().await, pid, "embed used the loaded runner");
    assert_eq!(loads(&h).await, 1, "no reload for embeddings");
    let legacy = ok(
        &h,
        "/api/embeddings",
        json!({"model": "smol", "prompt": "hello world", "options": opts()}),
    )
    .await;
    assert_eq!(legacy["embedding"].as_array().unwrap().len(), 576);
    // /v1/embeddings: the same runner and, float32 for float32, the same numbers as /api/embed.
    let v1 = ok(
        &h,
        "/v1/embeddings",
        json!({"model": "smol", "input": ["hello world", "a cat sat"]}),
    )
    .await;
    for (i, w) in warm.iter().enumerate() {
        let got: Vec<f64> = v1["data"][i]["embedding"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        assert_eq!(&got, w, "input {i}");
    }
    assert_eq!(h.runner_pid().await, pid);

    // Generation after the embeddings is unchanged (greedy, same slot state) and still one load.
    let again = ok(&h, "/api/generate", gen).await;
    assert_eq!(again["response"], first["response"]);
    assert_eq!(h.runner_pid().await, pid);
    assert_eq!(h.ps().await.len(), 1);
    assert_eq!(loads(&h).await, 1);

    // The same vectors from a runner that has only ever embedded.
    let r = h
        .post("/api/generate", json!({"model": "smol", "keep_alive": 0}))
        .await;
    assert_eq!(r.json()["done_reason"], "unload");
    assert!(scheduler_support::wait_gone(pid, Duration::from_secs(10)).await);
    let fresh = vectors(&ok(&h, "/api/embed", embed).await);
    assert_ne!(h.runner_pid().await, pid);
    for (w, f) in warm.iter().zip(&fresh) {
        let cos: f64 = w.iter().zip(f).map(|(a, b)| a * b).sum();
        assert!(cos > 0.9999, "cosine {cos}");
    }
}

/// `/api/ps`'s name for a model whose manifest another name shares (a copy): the name it was
/// loaded by, as Ollama shows the requested model's name, never the other one's.
#[tokio::test]
async fn ps_names_the_model_that_was_loaded_when_a_copy_shares_its_manifest() {
    let Some(h) = smol() else { return };
    let copy = h.post(
        "/api/copy",
        json!({"source": "smol", "destination": "smol2"}),
    );
    assert_eq!(copy.await.status, StatusCode::OK);
    let ps_names = || async {
        let ps = get(&h.app, "/api/ps").await.json();
        let names: Vec<(String, String)> = ps["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().into(),
                    m["model"].as_str().unwrap().into(),
                )
            })
            .collect();
        names
    };
    for (name, shown) in [("smol", "smol:latest"), ("smol2", "smol2:latest")] {
        let load = json!({"model": name, "keep_alive": "1m"});
        assert_eq!(ok(&h, "/api/generate", load).await["done_reason"], "load");
        assert_eq!(ps_names().await, [(shown.to_string(), shown.to_string())]);
        let unload = json!({"model": name, "keep_alive": 0});
        assert_eq!(
            ok(&h, "/api/generate", unload).await["done_reason"],
            "unload"
        );
        for _ in 0..50 {
            if ps_names().await.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(ps_names().await, []);
    }
}
