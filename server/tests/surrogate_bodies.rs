//! Request bodies holding a `\u` escape of a lone UTF-16 surrogate (`"\ud800"`), which some
//! clients send for a broken emoji: Go's encoding/json reads it as U+FFFD and Ollama serves the
//! request, where `serde_json` alone refuses the body. One request per API family to a fake
//! model that echoes its prompt: the replacement character reaches the model, and the reply is
//! a success; a body that is broken otherwise keeps its error.
//!
//! Needs `cargo build -p fake-runner`.

mod serve_support;

use axum::http::{Method, StatusCode};
use serde_json::Value;
use serve_support::api_support::send;
use serve_support::*;

const TEMPLATE: &str =
    "{{- range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}{{ if .Prompt }}{{ .Prompt }}{{ end }}";

fn harness() -> Harness {
    let h = Harness::new();
    h.fake("echo", &["--echo"], &[(MT_TEMPLATE, TEMPLATE.as_bytes())]);
    h
}

/// Posts `body` as written (a `serde_json::Value` cannot hold a lone surrogate).
async fn post_raw(h: &Harness, uri: &str, body: &str) -> Reply {
    send(&h.app, request(Method::POST, uri, body.to_string())).await
}

#[tokio::test]
async fn lone_surrogates_become_the_replacement_character() {
    let h = harness();
    // Each escape that is not half of a pair is U+FFFD; the pair is one emoji.
    let text = r#"a\ud800b\udc00c\ud83d\ude00"#;
    let want = "a\u{fffd}b\u{fffd}c\u{1f600}";
    // (endpoint, body, where the reply's text is)
    let cases: [(&str, String, &str); 4] = [
        (
            "/api/chat",
            format!(
                r#"{{"model":"echo","stream":false,"messages":[{{"role":"user","content":"{text}"}}]}}"#
            ),
            "/message/content",
        ),
        (
            "/api/generate",
            format!(r#"{{"model":"echo","stream":false,"raw":true,"prompt":"{text}"}}"#),
            "/response",
        ),
        (
            "/v1/chat/completions",
            format!(r#"{{"model":"echo","messages":[{{"role":"user","content":"{text}"}}]}}"#),
            "/choices/0/message/content",
        ),
        (
            "/v1/messages",
            format!(
                r#"{{"model":"echo","max_tokens":64,"messages":[{{"role":"user","content":"{text}"}}]}}"#
            ),
            "/content/0/text",
        ),
    ];
    for (uri, body, at) in cases {
        let r = post_raw(&h, uri, &body).await;
        assert_eq!(r.status, StatusCode::OK, "{uri}: {}", r.text());
        let reply = r.json();
        let got = reply
            .pointer(at)
            .and_then(Value::as_str)
            .unwrap_or_default();
        assert!(got.contains(want), "{uri}: {got:?}");
    }
}

#[tokio::test]
async fn other_broken_bodies_keep_their_errors() {
    let h = harness();
    let r = post_raw(
        &h,
        "/api/chat",
        r#"{"model":"echo","messages":[{"role":"user","content":"\ud800"}] x}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["error"],
        "invalid character 'x' after object key:value pair"
    );
    let r = post_raw(&h, "/api/generate", r#"{"model":"echo","prompt":"\ud800"#).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(r.json()["error"], "unexpected EOF");
    let r = post_raw(
        &h,
        "/api/generate",
        r#"{"model":"echo","prompt":["\ud800"]}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        r.json()["error"],
        "json: cannot unmarshal array into Go struct field GenerateRequest.prompt of type string"
    );
}
