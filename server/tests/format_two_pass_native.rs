//! `OLLAMA_FORMAT_TWO_PASS=1` end to end with the real runner: SmolLM2 with the thinking
//! TEMPLATE of format_native.rs (the thinking is closed by "."). The first generation runs free
//! and is cancelled when content begins; the second, re-prompted with the parsed thinking, is
//! constrained from its first token. The client sees the first pass's thinking (the same greedy
//! text as without a format) and schema-valid content, and the prompt evaluation of both passes
//! is added up, so it exceeds the single pass's one prefill.
//!
//! Needs `cargo build -p runner-llamacpp` and `scripts/fetch-test-models`; skips without them.

mod serve_support;

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

const THINKING_GO: &[u8] = b"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ if .Thinking }}Thoughts:{{ .Thinking }}.{{ end }}{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\nThoughts:";

#[tokio::test]
async fn smollm2_two_pass_thinks_then_answers_in_schema() {
    let (Some(runner), Some(path)) = (native_runner(), test_model(SMOL)) else {
        eprintln!("skipped: runner-llamacpp or {SMOL} missing");
        return;
    };
    let settings = server::engine::Settings {
        format_two_pass: true,
        ..Default::default()
    };
    let h = Harness::with_runner(
        runner,
        |c| c.load_timeout = Some(Duration::from_secs(120)),
        settings,
    );
    register_file(&h.ts, "smolthink", &path, &[(MT_TEMPLATE, THINKING_GO)]);
    let schema = json!({
        "type": "object",
        "properties": {"colour": {"type": "string", "maxLength": 16}, "sure": {"type": "boolean"}},
        "required": ["colour", "sure"],
        "additionalProperties": false
    });
    let messages = json!([{"role": "user", "content": "What colour is the sky? Think first."}]);
    let opts = json!({"temperature": 0, "seed": 1, "num_predict": 120, "num_thread": 1});
    let r = h
        .post(
            "/api/chat",
            json!({"model": "smolthink", "messages": messages, "format": schema,
                   "stream": false, "options": opts, "keep_alive": 0}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let b = r.json();
    eprintln!("{b}");
    let content = b["message"]["content"].as_str().unwrap();
    let v: Value =
        serde_json::from_str(content.trim()).unwrap_or_else(|e| panic!("{e}: {content:?}"));
    assert!(v["colour"].is_string() && v["sure"].is_boolean(), "{v}");
    assert_eq!(b["done_reason"], "stop");

    let free = h
        .post(
            "/api/chat",
            json!({"model": "smolthink", "messages": messages, "stream": false,
                   "options": opts, "keep_alive": 0}),
        )
        .await
        .json();
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
