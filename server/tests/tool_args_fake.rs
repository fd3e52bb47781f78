//! Tool-call arguments come back as Ollama's Go server prints them: the fake runner replays a
//! model writing a `<tool_call>` (the generic template-tag parser) whose numbers are spelled as
//! models spell them, and /api/chat, /v1/chat/completions and /v1/messages return the values
//! Go's `map[string]any` holds (float64) in encoding/json's text (`1.0` → `1`, `1e21` →
//! `1e+21`, `0.0000015` stays plain, an integer past 2^53 rounds), nested keys sorted.
//!
//! Needs `cargo build -p fake-runner`.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const TEMPLATE: &str = r#"{{- if .Tools }}<tools>{{ range .Tools }}{{ json .Function }}{{ end }}</tools>
{{ end }}{{- range .Messages }}{{ .Role }}: {{ .Content }}{{ if .ToolCalls }}<tool_call>{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}{{ end }}</tool_call>{{ end }}
{{ end }}assistant: "#;

/// What the model writes, in pieces as a runner streams it.
const OUTPUT: &[&str] = &[
    "<tool_call>{\"name\": \"add\", \"arguments\": {\"a\": 1.0, \"b\": 1e21, ",
    "\"c\": 0.0000015, \"d\": 12345678901234567890123, \"e\": {\"y\": 2.0, \"x\": 1E-7}, ",
    "\"f\": 9007199254740993}}",
    "</tool_call>",
];

/// The arguments as Ollama marshals them.
const GO_ARGS: &str = r#"{"a":1,"b":1e+21,"c":0.0000015,"d":1.2345678901234568e+22,"e":{"x":1e-7,"y":2},"f":9007199254740992}"#;

fn harness() -> Harness {
    let h = Harness::new();
    let tokens = serde_json::to_string(OUTPUT).unwrap();
    h.fake(
        "calc",
        &["--tokens-json", &tokens],
        &[(MT_TEMPLATE, TEMPLATE.as_bytes())],
    );
    h
}

fn tools() -> Value {
    json!([{"type": "function", "function": {"name": "add", "description": "Add",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}}])
}

#[tokio::test]
async fn argument_numbers_print_as_go_on_every_api() {
    let h = harness();
    let messages = json!([{"role": "user", "content": "add"}]);
    for stream in [false, true] {
        let r = h
            .post(
                "/api/chat",
                json!({"model": "calc", "messages": messages, "tools": tools(), "stream": stream}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let want = format!(r#""arguments":{GO_ARGS}"#);
        assert!(r.text().contains(&want), "stream={stream}: {}", r.text());
    }

    let r = h
        .post(
            "/v1/chat/completions",
            json!({"model": "calc", "messages": messages, "tools": tools()}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let call = &r.json()["choices"][0]["message"]["tool_calls"][0]["function"];
    assert_eq!(call["arguments"], json!(GO_ARGS), "{}", r.text());

    for stream in [false, true] {
        let r = h
            .post(
                "/v1/messages",
                json!({"model": "calc", "max_tokens": 64, "messages": messages,
                       "tools": [{"name": "add", "input_schema": {"type": "object"}}],
                       "stream": stream}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let want = if stream {
            // The streamed input is one `input_json_delta` string.
            format!(r#""partial_json":{}"#, json!(GO_ARGS))
        } else {
            format!(r#""input":{GO_ARGS}"#)
        };
        assert!(r.text().contains(&want), "stream={stream}: {}", r.text());
    }
}
