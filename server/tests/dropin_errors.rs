//! Request-decoding errors in Go's `encoding/json` words, as Ollama returns them (issue 14,
//! item 6), and the Anthropic layer's own messages — through the production router.

#[path = "api_support/mod.rs"]
mod api_support;

use api_support::*;
use axum::http::{Method, StatusCode};

async fn raw(app: &axum::Router, uri: &str, body: &str) -> Reply {
    send(app, request(Method::POST, uri, body.to_owned())).await
}

#[tokio::test]
async fn malformed_and_mistyped_bodies_get_go_wording() {
    let ts = TestStore::new();
    let app = ts.app();
    let cases = [
        (
            "/api/chat",
            "{model: \"x\"}",
            "invalid character 'm' looking for beginning of object key string",
        ),
        (
            "/api/chat",
            r#"{"model": "x", "options": "fast"}"#,
            "json: cannot unmarshal string into Go struct field ChatRequest.options of type map[string]interface {}",
        ),
        (
            "/api/chat",
            r#"{"model": "x", "messages": [{"role": "user", "content": 5}]}"#,
            "json: cannot unmarshal number into Go struct field Message.messages.content of type string",
        ),
        (
            "/api/generate",
            r#"{"model": "x", "prompt": ["a"]}"#,
            "json: cannot unmarshal array into Go struct field GenerateRequest.prompt of type string",
        ),
        (
            "/api/generate",
            r#"{"model": "x", "stream": "yes"}"#,
            "json: cannot unmarshal string into Go struct field GenerateRequest.stream of type bool",
        ),
        ("/api/generate", r#"{"model": "x", "#, "unexpected EOF"),
        ("/api/show", r#"{"model" "x"}"#, "invalid character '\"' after object key"),
        (
            "/api/pull",
            r#"{"model": "x", "insecure": 1}"#,
            "json: cannot unmarshal number into Go struct field PullRequest.insecure of type bool",
        ),
    ];
    for (uri, body, want) in cases {
        let r = raw(&app, uri, body).await;
        assert_eq!(
            r.status,
            StatusCode::BAD_REQUEST,
            "{uri} {body}: {}",
            r.text()
        );
        assert_eq!(r.json()["error"], want, "{uri} {body}");
    }
}

#[tokio::test]
async fn anthropic_layer_uses_ollamas_messages() {
    let ts = TestStore::new();
    let app = ts.app();
    let cases = [
        (
            r#"{"model": "x", "messages": [{"role": "user", "content": "hi"}]}"#,
            "max_tokens is required and must be positive",
        ),
        (
            r#"{"model": "x", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]}"#,
            "max_tokens is required and must be positive",
        ),
        (
            r#"{"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}"#,
            "model is required",
        ),
        (r#"{"model": "x", "max_tokens": 8}"#, "messages is required"),
        (
            r#"{"model": "x", "max_tokens": "8"}"#,
            "json: cannot unmarshal string into Go struct field MessagesRequest.max_tokens of type int",
        ),
    ];
    for (body, want) in cases {
        let r = raw(&app, "/v1/messages", body).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{body}: {}", r.text());
        let v = r.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
        assert_eq!(v["error"]["message"], want, "{body}");
    }
}
