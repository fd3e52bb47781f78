//! gpt-oss (harmony) through the real server, with the fake runner replaying what gpt-oss
//! writes, as Ollama's `routes_harmony_streaming_test.go` drives its chat handler:
//! - a gpt-oss model (family `gptoss`, a template with `<|start|>`/`<|end|>`) gets the harmony
//!   parser without naming one; the same template on another family does not;
//! - the prompt names the request's tools by their harmony names (`get-weather` →
//!   `get_weather`, a second one `get_weather_2`) while the conversation's earlier calls and tool
//!   results keep the client's names, and `think: "max"` prompts `high`;
//! - streamed chunks carry thinking or content as they arrive and the tool call only with the
//!   last chunk, under the client's name; the folded reply, `/v1/chat/completions` and
//!   `/api/generate` (calls without ids, names unmapped: it has no tools) agree.
//!
//! Needs `cargo build -p fake-runner`.

mod serve_support;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

/// gpt-oss's TEMPLATE in brief: the reasoning level, the tools as a TypeScript namespace, and
/// the conversation as harmony messages.
const GPT_OSS: &str = r#"<|start|>system<|message|>Reasoning: {{ if .IsThinkSet }}{{ .ThinkLevel }}{{ else }}medium{{ end }}
{{- if .Tools }}
namespace functions {
{{- range .Tools }}
type {{ .Function.Name }} = () => any;
{{- end }}
} // namespace functions{{ end }}<|end|>
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|start|>user<|message|>{{ .Content }}<|end|>
{{- else if eq .Role "assistant" }}
{{- if .Thinking }}<|start|>assistant<|channel|>analysis<|message|>{{ .Thinking }}<|end|>{{ end }}
{{- range .ToolCalls }}<|start|>assistant<|channel|>commentary to=functions.{{ .Function.Name }} <|constrain|>json<|message|>{{ json .Function.Arguments }}<|call|>{{ end }}
{{- if .Content }}<|start|>assistant<|channel|>final<|message|>{{ .Content }}<|end|>{{ end }}
{{- else if eq .Role "tool" }}<|start|>functions.{{ .ToolName }} to=assistant<|channel|>commentary<|message|>{{ .Content }}<|end|>
{{- end }}
{{- if and $last (ne .Role "assistant") }}<|start|>assistant{{ end }}
{{- end }}"#;

/// Thinking, a call to `get_weather` (its harmony name), then a final message, token by token.
const OUTPUT: &[&str] = &[
    "<|channel|>",
    "analysis",
    "<|message|>",
    "Need",
    " the weather.",
    "<|end|>",
    "<|start|>",
    "assistant",
    "<|channel|>",
    "commentary to=functions.get_weather",
    " <|constrain|>json",
    "<|message|>",
    "{\"city\":",
    " \"Paris\"}",
    "<|end|>",
    "<|start|>assistant",
    "<|channel|>final",
    "<|message|>",
    "Let me",
    " check.",
];

fn tools() -> Value {
    let tool = |name: &str| {
        json!({"type": "function", "function": {"name": name, "description": "Weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})
    };
    json!([tool("get-weather"), tool("get weather")])
}

/// The conversation so far: an earlier call to `get-weather` and its result.
fn messages() -> Value {
    json!([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get-weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_name": "get-weather", "content": "cold"},
        {"role": "user", "content": "And Paris?"},
    ])
}

/// A fake model `name` of `family` with the gpt-oss template, replaying [`OUTPUT`] and logging
/// the requests it receives to `log`.
fn model(h: &Harness, name: &str, family: &str, log: &std::path::Path) {
    let tokens = serde_json::to_string(OUTPUT).unwrap();
    let log = log.display().to_string();
    h.fake(
        name,
        &["--tokens-json", &tokens, "--request-log", &log],
        &[(MT_TEMPLATE, GPT_OSS.as_bytes())],
    );
    // The config's family, as create writes it from the GGUF's architecture.
    h.set_config(
        name,
        json!({"model_family": family, "model_families": [family]}),
    );
}

/// The prompts of the completion requests the runner received, in order.
fn prompts(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "request")
        .map(|e| e["request"]["prompt"].as_str().unwrap().to_owned())
        .collect()
}

fn assert_call(call: &Value, name: &str) {
    assert_eq!(call["function"]["name"], name, "{call}");
    assert_eq!(call["function"]["index"], 0, "{call}");
    assert_eq!(
        call["function"]["arguments"],
        json!({"city": "Paris"}),
        "{call}"
    );
}

#[tokio::test]
async fn chat_streams_harmony_and_maps_tool_names_back() {
    let h = Harness::new();
    let log = h.runner_dir.path().join("oss.jsonl");
    model(&h, "oss", "gptoss", &log);
    let body = |stream: bool| json!({"model": "oss", "messages": messages(), "tools": tools(), "stream": stream});

    // Streamed: each chunk carries thinking or content as it arrives; the call comes with the
    // last chunk, under the client's name.
    let r = h.post("/api/chat", body(true)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let chunks = lines(&r);
    let (last, rest) = chunks.split_last().unwrap();
    let shape: Vec<(&str, &str)> = rest
        .iter()
        .map(|c| {
            assert_eq!(c["done"], false, "{c}");
            assert!(c["message"].get("tool_calls").is_none(), "{c}");
            let m = &c["message"];
            (
                m["thinking"].as_str().unwrap_or(""),
                m["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            ("Need", ""),
            (" the weather.", ""),
            ("", "Let me"),
            ("", " check.")
        ]
    );
    assert_eq!(last["done"], true, "{last}");
    assert_eq!(last["done_reason"], "stop", "{last}");
    assert!(last["eval_count"].as_u64().unwrap() > 0, "{last}");
    assert_eq!(last["message"]["role"], "assistant");
    assert_eq!(last["message"]["content"], "");
    let calls = last["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{last}");
    assert_call(&calls[0], "get-weather");
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));

    // Folded into one reply.
    let r = h.post("/api/chat", body(false)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let m = &r.json()["message"];
    assert_eq!(m["thinking"], "Need the weather.");
    assert_eq!(m["content"], "Let me check.");
    assert_eq!(m["tool_calls"].as_array().unwrap().len(), 1, "{m}");
    assert_call(&m["tool_calls"][0], "get-weather");

    // OpenAI's layer reads the same call.
    let r = h.post("/v1/chat/completions", body(false)).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let choice = &r.json()["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get-weather");
    let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "Paris"}));

    // Streamed through OpenAI's layer: the call is in the last chunk with a delta.
    let mut req = body(true);
    req["messages"] = json!([{"role": "user", "content": "And Paris?"}]);
    let r = h.post("/v1/chat/completions", req).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let events: Vec<Value> = r
        .text()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let with_calls: Vec<&Value> = events
        .iter()
        .filter(|e| e["choices"][0]["delta"].get("tool_calls").is_some())
        .collect();
    assert_eq!(with_calls.len(), 1, "{events:?}");
    let call = &with_calls[0]["choices"][0]["delta"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "get-weather");
    let finish: Vec<&Value> = events
        .iter()
        .map(|e| &e["choices"][0]["finish_reason"])
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [&json!("tool_calls")], "{events:?}");

    // The prompt named the tools by their harmony names; the conversation kept the client's.
    let prompts = prompts(&log);
    assert_eq!(prompts.len(), 4);
    let p = &prompts[0];
    assert!(
        p.contains("namespace functions {\ntype get_weather = () => any;\ntype get_weather_2 = () => any;\n}"),
        "{p}"
    );
    assert!(
        p.contains("<|start|>assistant<|channel|>commentary to=functions.get-weather <|constrain|>json<|message|>{\"city\":\"Oslo\"}<|call|>"),
        "{p}"
    );
    assert!(
        p.contains("<|start|>functions.get-weather to=assistant<|channel|>commentary<|message|>cold<|end|>"),
        "{p}"
    );
    assert!(
        p.ends_with("<|start|>user<|message|>And Paris?<|end|><|start|>assistant"),
        "{p}"
    );
    // The folded request rendered the same (OpenAI's messages carry no `tool_name`).
    assert_eq!(prompts[1], *p);
    assert!(prompts[2].contains("type get_weather = () => any;\ntype get_weather_2"));
}

#[tokio::test]
async fn think_levels_and_generate() {
    let h = Harness::new();
    let log = h.runner_dir.path().join("oss.jsonl");
    model(&h, "oss", "gptoss", &log);
    // Harmony knows low, medium and high: `max` thinks high; `true` is medium.
    for think in [json!("max"), json!("low"), json!(true), json!(false)] {
        let r = h
            .post(
                "/api/chat",
                json!({"model": "oss", "messages": [{"role": "user", "content": "hi"}],
                       "think": think, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        // Without tools the call still comes back, under the model's name.
        let m = &r.json()["message"];
        assert_eq!(m["tool_calls"][0]["function"]["name"], "get_weather", "{m}");
        // Thinking off does not stop gpt-oss thinking; Ollama returns what it thought.
        assert_eq!(m["thinking"], "Need the weather.");
    }
    let reasoning: Vec<String> = prompts(&log)
        .iter()
        .map(|p| p.lines().next().unwrap().to_owned())
        .collect();
    assert_eq!(
        reasoning,
        [
            "<|start|>system<|message|>Reasoning: high<|end|><|start|>user<|message|>hi<|end|><|start|>assistant",
            "<|start|>system<|message|>Reasoning: low<|end|><|start|>user<|message|>hi<|end|><|start|>assistant",
            "<|start|>system<|message|>Reasoning: medium<|end|><|start|>user<|message|>hi<|end|><|start|>assistant",
            "<|start|>system<|message|>Reasoning: <|end|><|start|>user<|message|>hi<|end|><|start|>assistant",
        ]
    );

    // /api/generate parses harmony too; the call comes with the last chunk, without an id.
    for stream in [true, false] {
        let r = h
            .post(
                "/api/generate",
                json!({"model": "oss", "prompt": "hi", "think": "max", "stream": stream}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let chunks = lines(&r);
        let (last, rest) = chunks.split_last().unwrap();
        assert!(
            rest.iter().all(|c| c.get("tool_calls").is_none()),
            "{rest:?}"
        );
        let fold =
            |k: &str| -> String { chunks.iter().map(|c| c[k].as_str().unwrap_or("")).collect() };
        assert_eq!(fold("thinking"), "Need the weather.", "stream={stream}");
        assert_eq!(fold("response"), "Let me check.", "stream={stream}");
        assert_eq!(last["done"], true);
        let call = &last["tool_calls"][0];
        assert_call(call, "get_weather");
        assert!(call.get("id").is_none(), "{call}");
    }
    let p = prompts(&log).pop().unwrap();
    assert!(
        p.starts_with("<|start|>system<|message|>Reasoning: high<|end|>"),
        "{p}"
    );
}

#[tokio::test]
async fn only_gpt_oss_models_get_harmony() {
    let h = Harness::new();
    let log = h.runner_dir.path().join("llama.jsonl");
    model(&h, "notoss", "llama", &log);
    let r = h
        .post(
            "/api/chat",
            json!({"model": "notoss", "messages": [{"role": "user", "content": "hi"}],
                   "tools": tools(), "stream": false}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    // Not harmony: no tool is renamed, and no harmony call comes back.
    let m = &r.json()["message"];
    assert!(m.get("tool_calls").is_none(), "{m}");
    let p = prompts(&log).pop().unwrap();
    assert!(
        p.contains("type get-weather = () => any;\ntype get weather = () => any;"),
        "{p}"
    );
}
