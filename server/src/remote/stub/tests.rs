use super::*;
use serde_json::json;

fn stub_view() -> ModelView {
    let mut v = ModelView::default();
    v.config.remote_host = "https://ollama.com:443".into();
    v.config.remote_model = "gpt-oss:120b".into();
    v.system = "be brief".into();
    v.options = json!({"temperature": 0.5, "num_ctx": 8192})
        .as_object()
        .unwrap()
        .clone();
    v
}

fn rw() -> Rewrite {
    Rewrite {
        name: "mine:latest".into(),
        remote_model: "gpt-oss:120b".into(),
        remote_host: "https://ollama.com:443".into(),
    }
}

#[test]
fn reply_lines_are_renamed_and_keep_their_fields() {
    let table: [(&str, Line); 4] = [
        (
            r#"{"model":"gpt-oss:120b","created_at":"t","response":"hi","done":false,"x_extra":1}"#,
            Line::Chunk(
                br#"{"model":"mine:latest","remote_model":"gpt-oss:120b","remote_host":"https://ollama.com:443","created_at":"t","response":"hi","done":false,"x_extra":1}
"#
                .to_vec(),
            ),
        ),
        (
            r#"{"error":"model 'x' not found"}"#,
            Line::Error("model 'x' not found".into()),
        ),
        ("not json", Line::Error("not json".into())),
        ("[1,2]", Line::Error("[1,2]".into())),
    ];
    for (raw, want) in table {
        assert_eq!(rw().line(raw.as_bytes()), want, "{raw}");
    }
    // An empty error is no error (Go's omitempty).
    assert!(matches!(
        rw().line(br#"{"error":"","done":true}"#),
        Line::Chunk(_)
    ));
}

#[test]
fn generate_fills_the_stub_in_where_the_request_is_silent() {
    let req: GenerateRequest = serde_json::from_value(json!({
        "model": "mine", "prompt": "hi", "stream": false,
        "options": {"temperature": 0, "seed": 1}
    }))
    .unwrap();
    assert_eq!(
        generate_body(&req, &stub_view()),
        json!({
            "model": "gpt-oss:120b", "prompt": "hi", "system": "be brief",
            "template": "{{ .Prompt }}", "stream": false,
            "options": {"temperature": 0, "seed": 1, "num_ctx": 8192}
        })
    );
    let mut view = stub_view();
    view.template = Some("T {{ .Prompt }}".into());
    let req: GenerateRequest = serde_json::from_value(json!({
        "model": "mine", "prompt": "hi", "system": "mine", "template": "{{ .System }}",
        "think": true, "keep_alive": "1m", "raw": true, "logprobs": true, "top_logprobs": 2
    }))
    .unwrap();
    let body = generate_body(&req, &view);
    assert_eq!(body["system"], "mine");
    assert_eq!(body["template"], "{{ .System }}");
    assert_eq!(body["think"], true);
    assert_eq!(body["keep_alive"], "1m");
    assert_eq!(body["raw"], true);
    assert_eq!(body["top_logprobs"], 2);
    assert!(body.get("stream").is_none(), "unset stream stays unset");
}

#[test]
fn chat_prepends_the_stub_system_and_messages() {
    let mut view = stub_view();
    view.messages = vec![crate::create::Message {
        role: "user".into(),
        content: "earlier".into(),
        ..Default::default()
    }];
    let req: ChatRequest = serde_json::from_value(json!({
        "model": "mine", "messages": [{"role": "user", "content": "hi"}]
    }))
    .unwrap();
    let body = chat_body(&req, &view, "mine");
    assert_eq!(
        body["messages"],
        json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "earlier"},
            {"role": "user", "content": "hi"}
        ])
    );
    assert_eq!(body["model"], "gpt-oss:120b");
    assert_eq!(
        body["options"],
        json!({"temperature": 0.5, "num_ctx": 8192})
    );
    // A request that starts with its own system message keeps it alone.
    let req: ChatRequest = serde_json::from_value(json!({
        "model": "mine", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    }))
    .unwrap();
    assert_eq!(
        chat_body(&req, &stub_view(), "mine")["messages"][0]["content"],
        "s"
    );
    // No messages: a load request, `messages: null` as Go writes a nil slice.
    let req: ChatRequest = serde_json::from_value(json!({"model": "mine"})).unwrap();
    assert_eq!(
        chat_body(&req, &stub_view(), "mine")["messages"],
        Value::Null
    );
}

#[test]
fn old_thinking_is_dropped_for_qwen3_stubs() {
    let mut view = stub_view();
    view.system.clear();
    view.config.model_family = "qwen3".into();
    let req: ChatRequest = serde_json::from_value(json!({"model": "m", "messages": [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>hmm</think> answer"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "<think>kept</think>x"}
    ]}))
    .unwrap();
    let msgs = chat_body(&req, &view, "m")["messages"].clone();
    assert_eq!(msgs[1]["content"], "answer");
    assert_eq!(msgs[3]["content"], "<think>kept</think>x");
    view.config.model_family = "llama".into();
    let msgs = chat_body(&req, &view, "m")["messages"].clone();
    assert_eq!(msgs[1]["content"], "<think>hmm</think> answer");
}
