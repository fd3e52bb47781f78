//! Capabilities Ollama derives from a model's config alone (server/images.go
//! `modelFamilyCapabilities`): a gpt-oss family model thinks, so `/api/show` and `/api/tags`
//! list `thinking` and a `think` request is not refused. Needs `cargo build -p fake-runner` first.

mod serve_support;

use axum::http::StatusCode;
use serde_json::json;
use serve_support::*;
use server::gguf::GgufBuilder;

#[tokio::test]
async fn a_gpt_oss_family_model_thinks() {
    let h = Harness::new();
    let d = h.ts.blob(&GgufBuilder::tiny_llama().build().unwrap());
    for (name, family) in [("oss", "gptoss"), ("plain", "llama")] {
        let r = h
            .post(
                "/api/create",
                json!({"model": name, "files": {"m.gguf": d}, "info": {"model_family": family}, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    }
    let caps = |v: &serde_json::Value| -> Vec<String> {
        serde_json::from_value(v["capabilities"].clone()).unwrap()
    };
    let show = h.post("/api/show", json!({"model": "oss"})).await;
    assert_eq!(caps(&show.json()), ["completion", "thinking"]);
    let show = h.post("/api/show", json!({"model": "plain"})).await;
    assert_eq!(caps(&show.json()), ["completion"]);
    let tags = get(&h.app, "/api/tags").await;
    let tags = tags.json();
    let oss = tags["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "oss:latest")
        .expect("listed");
    assert_eq!(caps(oss), ["completion", "thinking"]);

    let chat = |model: &str| json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "think": true, "stream": false});
    let r = h.post("/api/chat", chat("oss")).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = h.post("/api/chat", chat("plain")).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"], "\"plain\" does not support thinking");
}
