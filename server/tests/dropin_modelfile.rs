//! Modelfile commands are acted on or refused, never stored and ignored (issue 14, item 5):
//! `REQUIRES` newer than the Ollama release herd implements refuses the model at inference with
//! the registry's wording; an unknown `RENDERER` or `PARSER` is refused at create; a known
//! `PARSER` selects that parser. The production router with the real
//! runner on SmolLM2.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

fn smol() -> Option<Harness> {
    smol_harness(&[])
}

async fn create(h: &Harness, body: Value) -> Reply {
    let mut body = body;
    body["stream"] = json!(false);
    h.post("/api/create", body).await
}

async fn chat(h: &Harness, model: &str) -> Reply {
    h.post(
        "/api/chat",
        json!({"model": model, "stream": false, "messages": [{"role": "user", "content": "hi"}],
               "options": {"num_predict": 2, "num_thread": 1}}),
    )
    .await
}

#[tokio::test]
async fn requires_renderer_and_parser_are_acted_on_or_refused() {
    let Some(h) = smol() else { return };
    // REQUIRES: an older release is fine, a newer one is refused at use.
    let r = create(
        &h,
        json!({"model": "old-enough", "from": "smol", "requires": "0.14.0"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(chat(&h, "old-enough").await.status, StatusCode::OK);
    let r = create(
        &h,
        json!({"model": "too-new", "from": "smol", "requires": "99.0.0"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = chat(&h, "too-new").await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let msg = r.json()["error"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("requires a newer version of Ollama") && msg.contains("99.0.0"),
        "{msg}"
    );
    let r = h
        .post("/api/embed", json!({"model": "too-new", "input": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());

    // RENDERER: a name herd has no renderer for is refused (it would fail every chat).
    let r = create(
        &h,
        json!({"model": "r", "from": "smol", "renderer": "made-up"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    assert!(
        r.text().contains("renderer \\\"made-up\\\" is not supported"),
        "{}",
        r.text()
    );
    // PARSER: unknown refused, known kept and shown.
    let r = create(
        &h,
        json!({"model": "p", "from": "smol", "parser": "made-up"}),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let r = create(&h, json!({"model": "p", "from": "smol", "parser": "qwen3"})).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let show = h.post("/api/show", json!({"model": "p"})).await.json();
    assert!(
        show["modelfile"].as_str().unwrap().contains("PARSER qwen3"),
        "{}",
        show["modelfile"]
    );
    assert_eq!(chat(&h, "p").await.status, StatusCode::OK);
}
