//! A model whose config names Ollama's qwen3-coder renderer and parser, served by the fake
//! runner replaying what Qwen3-Coder writes: the prompt the runner receives is the renderer's,
//! and the XML tool call in the output comes back as a typed `tool_calls` entry (arguments typed
//! by the request's tool schema), streamed or not, through /api/chat and /v1/chat/completions.
//!
//! Needs `cargo build -p fake-runner`.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const OUTPUT: &[&str] = &[
    "Let me check.",
    "\n<tool_",
    "call>\n<function=get_",
    "weather>\n<parameter=city>\nParis\n</param",
    "eter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
];

fn tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"}, "days": {"type": "integer"}}}}})
}

/// The fake model `coder` with `renderer` and `parser` set in its config, as a model pulled from
/// ollama.com carries them.
fn coder(h: &Harness, log: &std::path::Path) {
    let tokens = serde_json::to_string(OUTPUT).unwrap();
    let log = log.display().to_string();
    h.fake(
        "coder",
        &["--tokens-json", &tokens, "--request-log", &log],
        &[],
    );
    let path = h.ts.manifest_path("coder", "latest");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let digest = manifest["config"]["digest"]
        .as_str()
        .unwrap()
        .replace(':', "-");
    let blob = h.ts.root().join("blobs").join(digest);
    let mut config: Value = serde_json::from_slice(&std::fs::read(blob).unwrap()).unwrap();
    config["renderer"] = json!("qwen3-coder");
    config["parser"] = json!("qwen3-coder");
    let bytes = serde_json::to_vec(&config).unwrap();
    manifest["config"]["digest"] = json!(h.ts.blob(&bytes));
    manifest["config"]["size"] = json!(bytes.len());
    std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
}

#[tokio::test]
async fn qwen3_coder_calls_parse_into_typed_tool_calls() {
    let h = Harness::new();
    let log = h.runner_dir.path().join("requests.jsonl");
    coder(&h, &log);
    let messages = json!([{"role": "user", "content": "Weather in Paris for 3 days?"}]);
    for stream in [false, true] {
        let r = h
            .post(
                "/api/chat",
                json!({"model": "coder", "messages": messages, "tools": [tool()], "stream": stream}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let (mut content, mut calls) = (String::new(), Vec::new());
        for l in lines(&r) {
            content.push_str(l["message"]["content"].as_str().unwrap_or(""));
            calls.extend(
                l["message"]["tool_calls"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default(),
            );
        }
        assert_eq!(content, "Let me check.", "stream={stream}");
        assert_eq!(calls.len(), 1, "stream={stream}: {calls:?}");
        let f = &calls[0]["function"];
        assert_eq!(f["name"], "get_weather");
        // `days` is an integer in the schema: 3, not "3".
        assert_eq!(f["arguments"], json!({"city": "Paris", "days": 3}));
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    }
    // The runner got the renderer's prompt (tools as <function> blocks), not a TEMPLATE's.
    let logged = std::fs::read_to_string(&log).unwrap();
    let first: Value = serde_json::from_str(logged.lines().next().unwrap()).unwrap();
    let prompt = first["request"]["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("<tools>\n<function>\n<name>get_weather</name>")
            && prompt.ends_with(
                "<|im_start|>user\nWeather in Paris for 3 days?<|im_end|>\n<|im_start|>assistant\n"
            ),
        "{prompt}"
    );

    // OpenAI's layer reads the same parsed call.
    let r = h
        .post(
            "/v1/chat/completions",
            json!({"model": "coder", "messages": messages, "tools": [tool()]}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let choice = &r.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get_weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris", "days": 3}));
}
