//! Prompt token counts as Ollama reports them since 0.30 (issue 14, item 2): `prompt_eval_count`
//! is the whole prompt, tokens reused from the runner's prefix cache included, on /api/chat,
//! /api/generate (with `context`), /v1/chat/completions `usage.prompt_tokens`, /v1/messages
//! `usage.input_tokens`, the Anthropic stream's `message_start`, and /v1/responses' `usage`
//! (whose `input_tokens_details.cached_tokens` is the reused part). The real server and runner
//! on SmolLM2; the repeated request hits the slot's prefix cache, which before reported 1.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

fn smol() -> Option<Harness> {
    smol_harness(&[])
}

fn opts() -> Value {
    json!({"temperature": 0, "num_predict": 4, "num_thread": 1})
}

fn messages() -> Value {
    json!([{"role": "user", "content": "Name three colours of the rainbow, please."}])
}

async fn ok(h: &Harness, uri: &str, body: Value) -> Reply {
    let r = h.post(uri, body).await;
    assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.text());
    r
}

#[tokio::test]
async fn prompt_counts_include_cached_tokens_on_every_api() {
    let Some(h) = smol() else { return };
    let chat = json!({"model": "smol", "messages": messages(), "stream": false, "options": opts()});
    let first = ok(&h, "/api/chat", chat.clone()).await.json();
    let n = first["prompt_eval_count"].as_u64().unwrap();
    assert!(n > 10, "a whole chat prompt: {first}");
    // The same request again: the slot's cache holds all but the last prompt token.
    let again = ok(&h, "/api/chat", chat.clone()).await.json();
    assert_eq!(again["prompt_eval_count"].as_u64(), Some(n), "{again}");

    let oa = ok(
        &h,
        "/v1/chat/completions",
        json!({"model": "smol", "messages": messages(), "max_tokens": 4, "temperature": 0}),
    )
    .await
    .json();
    assert_eq!(oa["usage"]["prompt_tokens"].as_u64(), Some(n), "{oa}");

    let an = ok(
        &h,
        "/v1/messages",
        json!({"model": "smol", "messages": messages(), "max_tokens": 4, "temperature": 0}),
    )
    .await
    .json();
    assert_eq!(an["usage"]["input_tokens"].as_u64(), Some(n), "{an}");

    // /v1/responses reports the cached part too: the same prompt again reuses all but its
    // last token, streamed or not.
    let body = json!({"model": "smol", "input": messages(), "max_output_tokens": 4,
                      "temperature": 0});
    let rs = ok(&h, "/v1/responses", body.clone()).await.json();
    assert_eq!(rs["usage"]["input_tokens"].as_u64(), Some(n), "{rs}");
    assert_eq!(
        rs["usage"]["input_tokens_details"]["cached_tokens"].as_u64(),
        Some(n - 1),
        "{rs}"
    );
    let mut streamed = body;
    streamed["stream"] = json!(true);
    let sse = ok(&h, "/v1/responses", streamed).await.text();
    let done = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|v| v["type"] == "response.completed")
        .unwrap_or_else(|| panic!("no response.completed: {sse}"));
    assert_eq!(
        done["response"]["usage"]["input_tokens_details"]["cached_tokens"].as_u64(),
        Some(n - 1),
        "{done}"
    );

    // The stream's message_start carries the count before any text.
    let sse = ok(
        &h,
        "/v1/messages",
        json!({"model": "smol", "messages": messages(), "max_tokens": 4, "temperature": 0,
               "stream": true}),
    )
    .await
    .text();
    let start = sse
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str::<Value>(d).unwrap())
        .find(|v| v["type"] == "message_start")
        .unwrap_or_else(|| panic!("no message_start: {sse}"));
    assert_eq!(
        start["message"]["usage"]["input_tokens"].as_u64(),
        Some(n),
        "{start}"
    );
}

#[tokio::test]
async fn generate_with_context_counts_the_context() {
    let Some(h) = smol() else { return };
    let gen = |prompt: &str, context: Option<Value>| {
        let mut b = json!({"model": "smol", "prompt": prompt, "stream": false, "options": opts()});
        if let Some(c) = context {
            b["context"] = c;
        }
        b
    };
    let first = ok(&h, "/api/generate", gen("Say hello.", None))
        .await
        .json();
    let context = first["context"].clone();
    let ctx_len = context.as_array().unwrap().len() as u64;
    assert!(ctx_len > 5, "{first}");
    let second = ok(&h, "/api/generate", gen("Again.", Some(context)))
        .await
        .json();
    let n = second["prompt_eval_count"].as_u64().unwrap();
    assert!(
        n > ctx_len,
        "the context ({ctx_len} tokens) is part of the prompt: {second}"
    );
}

/// Issue 14, item 3: an image sent to a model without the vision capability gets Ollama's 400 on
/// every API (before, the bytes were dropped and the model answered as if it saw nothing).
#[tokio::test]
async fn images_to_a_text_model_are_refused_on_every_api() {
    let Some(h) = smol() else { return };
    const MSG: &str = "this model is missing data required for image input";
    // 1x1 PNG.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let cases = [
        (
            "/api/generate",
            json!({"model": "smol", "prompt": "what is this?", "images": [png], "stream": false}),
        ),
        (
            "/api/chat",
            json!({"model": "smol", "stream": false,
                   "messages": [{"role": "user", "content": "what is this?", "images": [png]}]}),
        ),
        (
            "/v1/chat/completions",
            json!({"model": "smol", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{png}")}}]}]}),
        ),
        (
            "/v1/messages",
            json!({"model": "smol", "max_tokens": 8, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
                {"type": "text", "text": "what is this?"}]}]}),
        ),
    ];
    for (uri, body) in cases {
        let r = h.post(uri, body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}: {}", r.text());
        assert!(r.text().contains(MSG), "{uri}: {}", r.text());
    }
    // Text alone still works.
    let r = ok(
        &h,
        "/api/chat",
        json!({"model": "smol", "stream": false, "options": opts(),
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert!(r.json()["message"]["content"].is_string());
}
