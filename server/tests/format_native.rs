//! Single-pass think+format end to end: the real server, parser and runner with SmolLM2 and a Go
//! TEMPLATE that opens a thinking block closed by a string the model writes naturally (".").
//! The thinking streams into `message.thinking`, the content after it is schema-valid JSON, and
//! the request needed exactly one prefill (the same prompt evaluation as without a format).
//! With `OLLAMA_FORMAT_TWO_PASS=1` the first generation runs free and is cancelled when content
//! begins; the second, re-prompted with the parsed thinking, is constrained from its first token:
//! the client sees the same thinking and schema-valid content, and both prefills are counted.
//!
//! Needs `cargo build -p runner-llamacpp` and `scripts/fetch-test-models`; skips without them.

mod serve_support;

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// Thinking tags inferred from the text around `.Thinking`: "Thoughts:" … "."; the prompt ends
/// with the opening tag, so the response starts inside the thinking.
const THINKING_GO: &[u8] = b"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ if .Thinking }}Thoughts:{{ .Thinking }}.{{ end }}{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\nThoughts:";

/// The real server and runner with SmolLM2 registered as "smolthink" under THINKING_GO; None
/// (skipped) when the runner or the model is missing.
fn smolthink(settings: server::engine::Settings) -> Option<Harness> {
    let (Some(runner), Some(path)) = (native_runner(), test_model(SMOL)) else {
        return None;
    };
    let h = Harness::with_runner(
        runner,
        |c| c.load_timeout = Some(Duration::from_secs(120)),
        settings,
    );
    register_file(&h.ts, "smolthink", &path, &[(MT_TEMPLATE, THINKING_GO)]);
    Some(h)
}

fn opts() -> Value {
    json!({"temperature": 0, "seed": 1, "num_predict": 120, "num_thread": 1})
}

/// The sky question on /api/chat, non-streamed, cold (keep_alive 0), with `format` when given.
async fn sky_chat(h: &Harness, format: Option<Value>) -> Value {
    let messages = json!([{"role": "user", "content": "What colour is the sky? Think first."}]);
    let mut req = json!({"model": "smolthink", "messages": messages, "stream": false,
                         "options": opts(), "keep_alive": 0});
    if let Some(f) = format {
        req["format"] = f;
    }
    let r = h.post("/api/chat", req).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    r.json()
}

fn sky_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 16}, "sure": {"type": "boolean"}},
        "required": ["colour", "sure"],
        "additionalProperties": false
    })
}

#[tokio::test]
async fn smollm2_thinks_then_answers_in_schema_with_one_prefill() {
    let Some(h) = smolthink(Default::default()) else {
        return;
    };
    let b = sky_chat(&h, Some(sky_schema())).await;
    eprintln!("{b}");
    let thinking = b["message"]["thinking"].as_str().unwrap_or("");
    let content = b["message"]["content"].as_str().unwrap();
    assert!(
        !thinking.is_empty(),
        "thinking streams into message.thinking: {b}"
    );
    let v: Value =
        serde_json::from_str(content.trim()).unwrap_or_else(|e| panic!("{e}: {content:?}"));
    assert!(v["colour"].is_string() && v["sure"].is_boolean(), "{v}");
    assert!(v.as_object().unwrap().len() == 2, "{v}");
    // One prefill: the same prompt evaluation as the unformatted request (both cold: keep_alive
    // 0 unloaded the runner in between).
    let free = sky_chat(&h, None).await;
    assert_eq!(b["prompt_eval_count"], free["prompt_eval_count"], "{free}");
    // Transparency: greedy thinking is the same text the unformatted request thinks.
    assert_eq!(free["message"]["thinking"], b["message"]["thinking"]);
}

#[tokio::test]
async fn smollm2_two_pass_thinks_then_answers_in_schema() {
    let settings = server::engine::Settings {
        format_two_pass: true,
        ..Default::default()
    };
    let Some(h) = smolthink(settings) else {
        return;
    };
    let b = sky_chat(&h, Some(sky_schema())).await;
    eprintln!("{b}");
    let content = b["message"]["content"].as_str().unwrap();
    let v: Value =
        serde_json::from_str(content.trim()).unwrap_or_else(|e| panic!("{e}: {content:?}"));
    assert!(v["colour"].is_string() && v["sure"].is_boolean(), "{v}");
    assert_eq!(b["done_reason"], "stop");

    let free = sky_chat(&h, None).await;
    // Pass one is the free generation up to the boundary: the same greedy thinking.
    assert!(!free["message"]["thinking"].as_str().unwrap().is_empty());
    assert_eq!(b["message"]["thinking"], free["message"]["thinking"]);
    // Two prefills: pass one's prompt plus pass two's, which holds the thinking.
    let count = |v: &Value| v["prompt_eval_count"].as_u64().unwrap();
    assert!(
        count(&b) > count(&free),
        "{} vs {}",
        count(&b),
        count(&free)
    );
    assert!(b["eval_count"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn generate_splits_thinking_and_formats_the_answer() {
    let Some(h) = smolthink(Default::default()) else {
        return;
    };
    let opts = opts();
    let schema = json!({
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 16}},
        "required": ["colour"],
        "additionalProperties": false
    });
    let b = h
        .post(
            "/api/generate",
            json!({"model": "smolthink", "prompt": "What colour is the sky? Think first.",
                   "format": schema, "stream": false, "options": opts}),
        )
        .await
        .json();
    assert!(!b["thinking"].as_str().unwrap_or("").is_empty(), "{b}");
    let v: Value = serde_json::from_str(b["response"].as_str().unwrap().trim()).unwrap();
    assert!(v["colour"].is_string(), "{v}");
    // Raw prompts name no closing strings: the format applies from the first token.
    let raw = h
        .post(
            "/api/generate",
            json!({"model": "smolthink", "prompt": "<|im_start|>user\nColour of grass?<|im_end|>\n<|im_start|>assistant\n",
                   "raw": true, "format": schema, "stream": false, "options": opts}),
        )
        .await
        .json();
    assert_eq!(raw["thinking"], Value::Null, "{raw}");
    let v: Value = serde_json::from_str(raw["response"].as_str().unwrap().trim()).unwrap();
    assert!(v["colour"].is_string(), "{v}");
}

/// Ollama's schema meaning (llama.cpp's json_schema_to_grammar): an object schema without
/// `additionalProperties` admits only its listed keys, and whitespace is bounded, so a sampled
/// small model returns compact objects and stops. Before objects were closed, half of these ran
/// to num_predict adding keys (issue 14, item 1).
#[tokio::test]
async fn schema_without_additional_properties_gives_compact_objects_that_stop() {
    let (Some(runner), Some(path)) = (native_runner(), test_model(SMOL)) else {
        return;
    };
    let h = Harness::with_runner(
        runner,
        |c| c.load_timeout = Some(Duration::from_secs(120)),
        Default::default(),
    );
    register_file(&h.ts, "smol", &path, &[]);
    let schema = json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "city": {"type": "string"}
        },
        "required": ["name", "age"]
    });
    let people = [
        "Alice, 31, lives in Paris",
        "Bob is 45 and from Berlin",
        "Carla (27) lives in Rome",
        "Dan, aged 60, Madrid",
        "Eve is a 22 year old from Oslo",
        "Frank, 38, Lisbon",
        "Grace, 51, from Vienna",
        "Hank is 19 and lives in Prague",
        "Ivy, 44, Dublin",
        "Jack is 33, from Athens",
    ];
    for (i, p) in people.iter().enumerate() {
        let b = h
            .post(
                "/api/chat",
                json!({"model": "smol", "stream": false, "format": schema,
                       "messages": [{"role": "user", "content": format!("Extract the person as JSON: {p}")}],
                       "options": {"temperature": 0.8, "seed": i, "num_predict": 96, "num_thread": 1}}),
            )
            .await;
        assert_eq!(b.status, StatusCode::OK, "{}", b.text());
        let b = b.json();
        let content = b["message"]["content"].as_str().unwrap();
        assert_eq!(b["done_reason"], "stop", "ran to num_predict: {content:?}");
        let v: Value = serde_json::from_str(content)
            .unwrap_or_else(|e| panic!("{p}: not JSON ({e}): {content:?}"));
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        for k in &keys {
            assert!(
                ["name", "age", "city"].contains(&k.as_str()),
                "unlisted key {k:?}: {content}"
            );
        }
        assert!(v["name"].is_string() && v["age"].is_i64(), "{content}");
        assert!(!content.contains("\n\n"), "blank lines: {content:?}");
    }
}
