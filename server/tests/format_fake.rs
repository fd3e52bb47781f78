//! Think+format and reasoning streams through the real server, prompt templates, parsers and
//! engine, with the fake runner replaying what reasoning models write: qwen3 `<think>…</think>`,
//! deepseek-r1 with a prompt that pre-opens `<think>`, harmony (gpt-oss) channels with a tool
//! call before the final message, and tool calls after thinking. The fake runner logs every
//! completion request it receives (`--request-log`), so the tests see exactly what the server
//! asked of the runner:
//! - single pass (default): ONE request whose constraint carries the parser's closing strings;
//! - `OLLAMA_FORMAT_TWO_PASS` (`Settings::format_two_pass`): an unconstrained first request,
//!   cancelled once content begins, then a constrained one (no closing strings) whose prompt
//!   holds the parsed thinking; the client sees pass one's thinking and pass two's content, and
//!   the metrics add both passes.
//!
//! Needs `cargo build -p fake-runner`.

mod serve_support;

use std::path::PathBuf;
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const QWEN: &str = r#"{{- if .Tools }}<|im_start|>system
<tools>
{{- range .Tools }}
{{ json .Function }}
{{- end }}
</tools><|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Thinking }}<think>{{ .Thinking }}</think>
{{ end }}{{ if .Content }}{{ .Content }}{{ else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>{{ end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}"#;

/// deepseek-r1 style: the prompt pre-opens the thinking block.
const DEEPSEEK: &str = r#"{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<｜User｜>{{ .Content }}
{{- else if eq .Role "assistant" }}<｜Assistant｜>{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}{{ if not $last }}<｜end▁of▁sentence｜>{{ end }}
{{- end }}
{{- if and $last (ne .Role "assistant") }}<｜Assistant｜><think>
{{ end }}
{{- end }}"#;

const HARMONY: &str = r#"<|start|>system<|message|>You are a helpful assistant.{{ if .Tools }}
# Tools
{{ range .Tools }}{{ json .Function }}
{{ end }}{{ end }}<|end|>
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|start|>user<|message|>{{ .Content }}<|end|>
{{- else if eq .Role "assistant" }}
{{- if .Thinking }}<|start|>assistant<|channel|>analysis<|message|>{{ .Thinking }}<|end|>{{ end }}
{{- if .Content }}<|start|>assistant<|channel|>final<|message|>{{ .Content }}<|end|>{{ end }}
{{- else if eq .Role "tool" }}<|start|>functions.{{ .ToolName }} to=assistant<|channel|>commentary<|message|>{{ .Content }}<|end|>
{{- end }}
{{- if and $last (ne .Role "assistant") }}<|start|>assistant{{ end }}
{{- end }}"#;

/// qwen3: thinking, then the answer; then text a two-pass first request never reaches.
const QWEN_STREAM: &[&str] = &[
    "<think>",
    "\n",
    "The",
    " user",
    " wants",
    " JSON.",
    "\n",
    "</think>",
    "\n\n",
    "{\"answer\":",
    " 42}",
];
/// Chunks of `QWEN_STREAM` up to and including the first with content.
const QWEN_BOUNDARY: u64 = 10;
/// What the fake writes when the prompt already holds the thinking (two-pass pass two).
const PASS_TWO: &[&str] = &["{\"answer\":", " 7}"];

/// Chunks separated by `~`: analysis, a tool call (commentary), then the final message.
const HARMONY_STREAM: &str =
    "<|channel|>~analysis~<|message|>~Need~ the weather~ first.~<|end|>~<|start|>~\
    assistant~<|channel|>~commentary to=functions.get_weather~ <|constrain|>json~\
    <|message|>~{\"city\":~ \"Paris\"}~<|call|>~<|start|>assistant~<|channel|>final~\
    <|message|>~{\"answer\":~ \"sunny\"}~<|return|>";

fn schema() -> Value {
    json!({"type": "object", "properties": {"answer": {}}, "required": ["answer"]})
}

fn weather_tool() -> Value {
    json!([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

struct Fake {
    h: Harness,
    log: PathBuf,
}

impl Fake {
    /// A server (two-pass when `two_pass`) with one fake model `name` whose TEMPLATE is
    /// `template`, replying `first` to any prompt and `second` to one containing `when`.
    fn new(
        two_pass: bool,
        name: &str,
        template: &str,
        first: &[&str],
        second: Option<(&str, &[&str])>,
    ) -> Fake {
        let settings = server::engine::Settings {
            format_two_pass: two_pass,
            ..Default::default()
        };
        let h = Harness::with(|_| {}, settings);
        let log = h.runner_dir.path().join(format!("{name}.requests.jsonl"));
        let first = serde_json::to_string(first).unwrap();
        let mut args = vec![
            "--tokens-json".to_string(),
            first,
            "--token-delay-ms".into(),
            "3".into(),
            "--request-log".into(),
            log.display().to_string(),
        ];
        if let Some((when, tokens)) = second {
            args.push("--rule".into());
            args.push(json!({"when": when, "tokens": tokens}).to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        h.fake(name, &args, &[(MT_TEMPLATE, template.as_bytes())]);
        Fake { h, log }
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The completion requests the runner received, in order.
    fn requests(&self) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["event"] == "request")
            .map(|e| e["request"].clone())
            .collect()
    }

    /// How request `seq` ended (`done` or `cancelled`), waiting for the runner to notice.
    async fn ending(&self, seq: u64) -> Value {
        for _ in 0..200 {
            if let Some(e) = self
                .events()
                .into_iter()
                .find(|e| e["seq"] == seq && e["event"] != "request")
            {
                return e;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("request {seq} never ended: {:?}", self.events());
    }
}

/// Streamed NDJSON folded the way a client reads it: (thinking, content, tool calls, last line).
/// Also checks that no content arrives before the thinking is over.
fn fold_stream(
    lines: &[Value],
    field: impl Fn(&Value) -> &Value,
) -> (String, String, Vec<Value>, Value) {
    let (mut thinking, mut content, mut calls) = (String::new(), String::new(), Vec::new());
    for l in lines {
        let m = field(l);
        let t = m["thinking"].as_str().unwrap_or("");
        assert!(
            t.is_empty() || content.is_empty(),
            "thinking after content: {lines:?}"
        );
        thinking.push_str(t);
        content.push_str(
            m["content"]
                .as_str()
                .or(m["response"].as_str())
                .unwrap_or(""),
        );
        calls.extend(m["tool_calls"].as_array().cloned().unwrap_or_default());
    }
    (thinking, content, calls, lines.last().unwrap().clone())
}

/// The constraint's closing strings (the protocol omits an empty list).
fn constraint_close(req: &Value) -> Value {
    req["constraint"]
        .get("thinking_close")
        .cloned()
        .unwrap_or(json!([]))
}

fn prompt_of(req: &Value) -> &str {
    req["prompt"].as_str().expect("text prompt")
}

#[tokio::test]
async fn qwen3_single_pass_chat_one_request_with_the_closing_tag() {
    let f = Fake::new(false, "qwen", QWEN, QWEN_STREAM, None);
    let messages = json!([{"role": "user", "content": "Answer in JSON"}]);
    for stream in [false, true] {
        let r = f
            .h
            .post(
                "/api/chat",
                json!({"model": "qwen", "messages": messages, "format": schema(), "stream": stream}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let (thinking, content, _, last) = if stream {
            fold_stream(&lines(&r), |l| &l["message"])
        } else {
            let b = r.json();
            let m = &b["message"];
            (
                m["thinking"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
                vec![],
                b.clone(),
            )
        };
        assert_eq!(
            thinking, "The user wants JSON.\n",
            "right-hand whitespace kept, as Ollama"
        );
        assert_eq!(content, "{\"answer\": 42}");
        assert_eq!(last["done_reason"], "stop");
    }
    let reqs = f.requests();
    assert_eq!(reqs.len(), 2, "one runner request per chat: {reqs:?}");
    for req in &reqs {
        assert_eq!(req["constraint"]["type"], "json_schema", "{req}");
        assert_eq!(req["constraint"]["schema"], schema());
        assert_eq!(constraint_close(req), json!(["</think>"]));
    }
    // Without a format there is no constraint; thinking off names no closing strings.
    f.h.post(
        "/api/chat",
        json!({"model": "qwen", "messages": messages, "stream": false}),
    )
    .await;
    f.h.post(
        "/api/chat",
        json!({"model": "qwen", "messages": messages, "stream": false, "think": false, "format": "json"}),
    )
    .await;
    let reqs = f.requests();
    assert_eq!(reqs[2]["constraint"], Value::Null);
    assert_eq!(reqs[3]["constraint"]["type"], "json");
    assert_eq!(constraint_close(&reqs[3]), json!([]));
}

#[tokio::test]
async fn deepseek_pre_opened_generate_splits_thinking_in_both_modes() {
    let stream: &[&str] = &[
        "Hmm",
        ", the",
        " answer",
        " is 42.",
        "</think>",
        "\n\n",
        "{\"answer\":",
        " 42}",
    ];
    for two_pass in [false, true] {
        let f = Fake::new(
            two_pass,
            "r1",
            DEEPSEEK,
            stream,
            Some(("</think>", PASS_TWO)),
        );
        for streamed in [true, false] {
            let r = f
                .h
                .post(
                    "/api/generate",
                    json!({"model": "r1", "prompt": "Why?", "format": schema(), "stream": streamed}),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
            let (thinking, content) = if streamed {
                let (t, c, _, _) = fold_stream(&lines(&r), |l| l);
                (t, c)
            } else {
                let b = r.json();
                (
                    b["thinking"].as_str().unwrap().into(),
                    b["response"].as_str().unwrap().into(),
                )
            };
            assert_eq!(thinking, "Hmm, the answer is 42.", "two_pass={two_pass}");
            let want = if two_pass {
                "{\"answer\": 7}"
            } else {
                "{\"answer\": 42}"
            };
            assert_eq!(content, want, "two_pass={two_pass}");
        }
        let reqs = f.requests();
        assert!(
            prompt_of(&reqs[0]).ends_with("<｜Assistant｜><think>\n"),
            "{}",
            reqs[0]
        );
        if two_pass {
            assert_eq!(reqs.len(), 4, "two requests per generate");
            assert_eq!(reqs[0]["constraint"], Value::Null);
            assert_eq!(constraint_close(&reqs[1]), json!([]));
            assert!(
                prompt_of(&reqs[1])
                    .ends_with("<｜Assistant｜><think>Hmm, the answer is 42.</think>"),
                "{}",
                reqs[1]
            );
        } else {
            assert_eq!(reqs.len(), 2, "one request per generate");
            assert_eq!(constraint_close(&reqs[0]), json!(["</think>"]));
        }
    }
}

#[tokio::test]
async fn harmony_tool_call_before_the_final_message() {
    for two_pass in [false, true] {
        let f = Fake::new(
            two_pass,
            "oss",
            HARMONY,
            &HARMONY_STREAM.split('~').collect::<Vec<_>>(),
            Some((
                "<|channel|>final<|message|>",
                &["{\"answer\":", " \"rainy\"}"],
            )),
        );
        f.h.set_config("oss", json!({"model_family": "gptoss"}));
        for stream in [true, false] {
            let r =
                f.h.post(
                    "/api/chat",
                    json!({"model": "oss", "messages": [{"role": "user", "content": "Weather?"}],
                           "tools": weather_tool(), "format": schema(), "stream": stream}),
                )
                .await;
            assert_eq!(r.status, StatusCode::OK, "{}", r.text());
            let (thinking, content, calls) = if stream {
                let (t, c, calls, _) = fold_stream(&lines(&r), |l| &l["message"]);
                (t, c, calls)
            } else {
                let b = r.json();
                let m = &b["message"];
                (
                    m["thinking"].as_str().unwrap().to_owned(),
                    m["content"].as_str().unwrap().to_owned(),
                    m["tool_calls"].as_array().cloned().unwrap_or_default(),
                )
            };
            assert_eq!(thinking, "Need the weather first.");
            assert_eq!(calls.len(), 1, "{calls:?}");
            assert_eq!(calls[0]["function"]["name"], "get_weather");
            assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Paris"}));
            let want = if two_pass {
                "{\"answer\": \"rainy\"}"
            } else {
                "{\"answer\": \"sunny\"}"
            };
            assert_eq!(content, want, "two_pass={two_pass}");
        }
        let reqs = f.requests();
        if two_pass {
            assert_eq!(reqs.len(), 4);
            assert_eq!(reqs[0]["constraint"], Value::Null);
            let second = prompt_of(&reqs[1]);
            assert!(
                second.ends_with("<|start|>assistant<|channel|>analysis<|message|>Need the weather first.<|end|><|start|>assistant<|channel|>final<|message|>"),
                "{second}"
            );
            assert_eq!(constraint_close(&reqs[1]), json!([]));
        } else {
            assert_eq!(reqs.len(), 2);
            assert_eq!(
                constraint_close(&reqs[0]),
                json!(["<|channel|>final<|message|>"])
            );
        }
    }
}

#[tokio::test]
async fn tool_calls_after_thinking() {
    let stream: &[&str] = &[
        "<think>",
        "Call",
        " the tool.",
        "</think>",
        "\n\n",
        "<tool_",
        "call>\n",
        "{\"name\": \"get_weather\", ",
        "\"arguments\": {\"city\": \"Paris\"}}",
        "\n</tool_call>",
    ];
    for two_pass in [false, true] {
        let f = Fake::new(two_pass, "qwen", QWEN, stream, None);
        let r =
            f.h.post(
                "/api/chat",
                json!({"model": "qwen", "messages": [{"role": "user", "content": "Weather?"}],
                       "tools": weather_tool(), "stream": true}),
            )
            .await;
        let (thinking, content, calls, last) = fold_stream(&lines(&r), |l| &l["message"]);
        assert_eq!(thinking, "Call the tool.");
        assert_eq!(content, "");
        assert_eq!(calls.len(), 1, "{calls:?}");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        assert_eq!(calls[0]["function"]["index"], 0);
        assert_eq!(calls[0]["function"]["arguments"], json!({"city": "Paris"}));
        assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
        assert_eq!(last["done"], true);
        // No format: one plain request in either mode.
        let reqs = f.requests();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0]["constraint"], Value::Null);
        assert!(
            prompt_of(&reqs[0]).contains("\"name\":\"get_weather\""),
            "{}",
            reqs[0]
        );
    }
}

#[tokio::test]
async fn two_pass_chat_cancels_the_first_and_sums_metrics() {
    // Pass one keeps writing after its content starts: the server must cut it off.
    let mut first: Vec<&str> = QWEN_STREAM.to_vec();
    first.extend(std::iter::repeat_n(" filler", 40));
    let f = Fake::new(true, "qwen", QWEN, &first, Some(("</think>", PASS_TWO)));
    let messages = json!([{"role": "user", "content": "Answer in JSON"}]);
    for (i, stream) in [true, false].into_iter().enumerate() {
        let r = f
            .h
            .post(
                "/api/chat",
                json!({"model": "qwen", "messages": messages, "format": schema(), "stream": stream}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let (thinking, content, last) = if stream {
            // Pass one's content ("42") never reaches the client: content is pass two's alone.
            let (t, c, _, last) = fold_stream(&lines(&r), |l| &l["message"]);
            (t, c, last)
        } else {
            let b = r.json();
            let m = &b["message"];
            (
                m["thinking"].as_str().unwrap().to_owned(),
                m["content"].as_str().unwrap().to_owned(),
                b.clone(),
            )
        };
        assert_eq!(
            thinking, "The user wants JSON.\n",
            "right-hand whitespace kept, as Ollama"
        );
        assert_eq!(content, "{\"answer\": 7}");
        assert_eq!(last["done_reason"], "stop");

        let reqs = f.requests();
        let (one, two) = (&reqs[2 * i], &reqs[2 * i + 1]);
        assert_eq!(one["constraint"], Value::Null, "pass one is free");
        assert_eq!(two["constraint"]["type"], "json_schema");
        assert_eq!(two["constraint"]["schema"], schema());
        assert_eq!(
            constraint_close(two),
            json!([]),
            "pass two: format from token 0"
        );
        assert!(
            prompt_of(two)
                .ends_with("<|im_start|>assistant\n<think>The user wants JSON.\n</think>\n"),
            "{two}"
        );
        assert!(prompt_of(two).starts_with(prompt_of(one)));
        let end = f.ending(2 * i as u64).await;
        assert_eq!(end["event"], "cancelled", "{end}");
        assert!(end["tokens"].as_u64().unwrap() < first.len() as u64);
        assert_eq!(f.ending(2 * i as u64 + 1).await["event"], "done");

        // The fake counts one token per prompt byte plus BOS; pass one's prompt is the server's
        // count, pass two's the runner's.
        let ptoks = |r: &Value| prompt_of(r).len() as u64 + u64::from(r["add_special"] == true);
        assert_eq!(last["prompt_eval_count"], ptoks(one) + ptoks(two), "{last}");
        assert_eq!(
            last["eval_count"],
            QWEN_BOUNDARY + PASS_TWO.len() as u64,
            "{last}"
        );
        for k in [
            "prompt_eval_duration",
            "eval_duration",
            "total_duration",
            "load_duration",
        ] {
            assert!(last[k].as_u64().unwrap() > 0, "{k}: {last}");
        }
        assert!(
            last["total_duration"].as_u64().unwrap()
                >= last["prompt_eval_duration"].as_u64().unwrap()
                    + last["eval_duration"].as_u64().unwrap()
        );
    }
}

#[tokio::test]
async fn two_pass_without_content_is_one_request() {
    // Cut inside the thinking (num_predict): no content ever begins, so no second pass.
    let f = Fake::new(
        true,
        "qwen",
        QWEN,
        QWEN_STREAM,
        Some(("</think>", PASS_TWO)),
    );
    let b =
        f.h.post(
            "/api/chat",
            json!({"model": "qwen", "messages": [{"role": "user", "content": "x"}],
                   "format": schema(), "stream": false, "options": {"num_predict": 5}}),
        )
        .await
        .json();
    assert_eq!(b["message"]["thinking"], "The user wants");
    assert_eq!(b["message"]["content"], "");
    assert_eq!(b["done_reason"], "length");
    assert_eq!(b["eval_count"], 5);
    let reqs = f.requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0]["constraint"], Value::Null);
    // A format on a response that starts in content (think off) is one constrained request.
    f.h.post(
        "/api/chat",
        json!({"model": "qwen", "messages": [{"role": "user", "content": "x"}],
               "format": schema(), "stream": false, "think": false}),
    )
    .await;
    let reqs = f.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1]["constraint"]["type"], "json_schema");
}

#[tokio::test]
async fn deepseek_r1_drops_thinking_from_earlier_turns() {
    let messages = json!([
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "<think>old reasoning</think>old answer"},
        {"role": "user", "content": "second"}
    ]);
    // Ollama keys this on the name (deepseek-r1) or the qwen3 family, not on the capability.
    for (name, stripped) in [("deepseek-r1", true), ("r1", false)] {
        let f = Fake::new(false, name, DEEPSEEK, QWEN_STREAM, None);
        let r =
            f.h.post(
                "/api/chat",
                json!({"model": name, "messages": messages, "stream": false}),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text());
        let reqs = f.requests();
        let prompt = prompt_of(&reqs[0]);
        assert!(
            prompt.contains("<｜Assistant｜>old answer<｜end▁of▁sentence｜>") == stripped,
            "{prompt}"
        );
        assert_eq!(prompt.contains("old reasoning"), !stripped, "{prompt}");
    }
}
