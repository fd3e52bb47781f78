//! Exact-shape tests for the chat translation (request → native, native → OpenAI).

use super::*;
use crate::api::types::Metrics;

fn req(v: Value) -> ChatCompletionRequest {
    serde_json::from_value(v).unwrap()
}

fn chunk(content: &str, thinking: &str) -> ChatResponse {
    let mut m = Message::assistant(content);
    m.thinking = thinking.into();
    ChatResponse {
        model: "smollm2:latest".into(),
        created_at: "t".into(),
        message: m,
        ..Default::default()
    }
}

fn done(reason: &str) -> ChatResponse {
    ChatResponse {
        done: true,
        done_reason: Some(reason.into()),
        metrics: Metrics {
            prompt_eval_count: 5,
            eval_count: 3,
            ..Metrics::default()
        },
        ..chunk("", "")
    }
}

#[test]
fn request_becomes_native() {
    let n = to_native(req(json!({
        "model": "smollm2",
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "what is"}, {"type": "text", "text": "this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]},
            {"role": "assistant", "content": null, "reasoning": "hm",
             "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"}
        ],
        "max_tokens": 10, "seed": 1, "stop": ["x"], "response_format": {"type": "json_object"},
        "reasoning_effort": "minimal", "logprobs": true, "top_logprobs": 2,
        "some_future_field": {"ignored": true}
    })))
    .unwrap();
    assert_eq!(n.model, "smollm2");
    assert_eq!(n.stream, Some(false), "OpenAI does not stream by default");
    assert_eq!(n.format, Some(json!("json")));
    assert_eq!(n.think, Some(json!("low")));
    assert!(n.logprobs);
    assert_eq!(n.top_logprobs, 2);
    assert_eq!(
        Value::Object(n.options.unwrap()),
        json!({"num_predict": 10, "temperature": 1.0, "top_p": 1.0, "seed": 1, "stop": ["x"]})
    );
    let wire = crate::api::types::wire(&n.messages);
    assert_eq!(
        wire,
        vec![
            json!({"role": "system", "content": "be brief"}),
            // One message per part, as Ollama; the renderer joins same-role turns again.
            json!({"role": "user", "content": "what is"}),
            json!({"role": "user", "content": "this?"}),
            json!({"role": "user", "content": "", "images": ["aGk="]}),
            json!({"role": "assistant", "content": "", "thinking": "hm",
                   "tool_calls": [{"id": "call_1", "function": {"index": 0, "name": "look", "arguments": {"q": 1}}}]}),
            json!({"role": "tool", "content": "a cat", "tool_name": "look", "tool_call_id": "call_1"}),
        ]
    );
}

#[test]
fn bad_requests() {
    let err = |v: Value| to_native(req(v)).unwrap_err();
    let e = err(json!({"model": "m", "messages": []}));
    assert_eq!(
        (e.status.as_u16(), e.message.as_str()),
        (400, "[] is too short - 'messages'")
    );
    assert_eq!(
        err(json!({"model": "m"})).message,
        "[] is too short - 'messages'"
    );
    let e = err(
        json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}),
    );
    assert_eq!(e.status, 400);
    assert!(
        e.message.contains("image URLs are not currently supported"),
        "{}",
        e.message
    );
    let e = err(
        json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": "data:image/gif;base64,aGk="}]}]}),
    );
    assert!(
        e.message.starts_with("invalid image input"),
        "{}",
        e.message
    );
    let e = err(
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"description": "no name"}}]}),
    );
    assert_eq!(e.status, 400);
    let e =
        err(json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "audio"}]}]}));
    assert_eq!(e.message, "invalid message format");
    let e = err(json!({"model": "m", "messages": [{"role": "user"}]}));
    assert_eq!(e.message, "invalid message content type: <nil>");
    let e = err(
        json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "function": {"name": "f", "arguments": "not json"}}]}]}),
    );
    assert_eq!(e.message, "invalid tool call arguments");
    // Formats Ollama does not know ask for none, rather than failing.
    for rf in [
        json!({"type": "json_schema"}),
        json!({"type": "text"}),
        json!({"type": "grammar"}),
    ] {
        let n = to_native(req(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "response_format": rf}))).unwrap();
        assert_eq!(n.format, None);
    }
    let n = to_native(req(
        json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": " JSON_Object "}}),
    ))
    .unwrap();
    assert_eq!(n.format, Some(json!("json")));
}

#[test]
fn schema_format_and_reasoning_object() {
    let n = to_native(req(json!({
        "model": "m", "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
            "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}},
        "reasoning": {"effort": "none"}, "temperature": 0.2, "top_p": 0.5, "max_completion_tokens": 4
    })))
    .unwrap();
    assert_eq!(
        n.format,
        Some(json!({"type": "object", "properties": {"a": {"type": "integer"}}}))
    );
    assert_eq!(n.think, Some(json!(false)));
    let o = n.options.unwrap();
    assert_eq!(
        (
            o["temperature"].clone(),
            o["top_p"].clone(),
            o["num_predict"].clone()
        ),
        (json!(0.2), json!(0.5), json!(4))
    );
    // A `reasoning` object wins over `reasoning_effort`, even with no effort in it (Ollama).
    let think = |extra: Value| {
        let mut b = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        to_native(req(b)).unwrap().think
    };
    assert_eq!(
        think(json!({"reasoning": {"effort": "low"}, "reasoning_effort": "high"})),
        Some(json!("low"))
    );
    assert_eq!(
        think(json!({"reasoning": {}, "reasoning_effort": "high"})),
        None
    );
    assert_eq!(
        think(json!({"reasoning_effort": "high"})),
        Some(json!("high"))
    );
    assert_eq!(think(json!({"reasoning_effort": ""})), None);
    let err = common::think(Some("bogus")).unwrap_err();
    assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
    assert_eq!(
        err.message,
        "invalid reasoning value: \"bogus\" (must be \"minimal\", \"low\", \"medium\", \"high\", \"xhigh\", \"ultra\", \"max\", or \"none\")"
    );
}

#[test]
fn non_streamed_completion_shape() {
    let mut r = done("stop");
    r.message.content = "Hello!".into();
    r.message.thinking = "greet".into();
    assert_eq!(
        serde_json::to_string(&completion(&r, "chatcmpl-7", 1700000000)).unwrap(),
        r#"{"id":"chatcmpl-7","object":"chat.completion","created":1700000000,"model":"smollm2:latest","system_fingerprint":"fp_ollama","choices":[{"index":0,"message":{"role":"assistant","content":"Hello!","reasoning":"greet"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#
    );
    r.message.tool_calls = vec![ToolCall {
        id: "call_abc".into(),
        function: ToolCallFunction {
            index: 0,
            name: "f".into(),
            arguments: serde_json::from_value(json!({"x": 1})).unwrap(),
        },
    }];
    let v = completion(&r, "chatcmpl-7", 1);
    assert_eq!(v["choices"][0]["finish_reason"], json!("tool_calls"));
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"],
        json!([{"id": "call_abc", "index": 0, "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}])
    );
    assert_eq!(
        completion(&done("length"), "i", 1)["choices"][0]["finish_reason"],
        json!("length")
    );
}

#[test]
fn stream_frames_exact() {
    let mut f = ChunkFrames::new("chatcmpl-1".into(), 42, true);
    let mut out = f.chunk(chunk("", "hmm"));
    out += &f.chunk(chunk("Hi", "!"));
    out += &f.chunk(chunk("", ""));
    out += &f.chunk(done("stop"));
    out += &f.finish();
    let head = r#"{"id":"chatcmpl-1","object":"chat.completion.chunk","created":42,"model":"smollm2:latest","system_fingerprint":"fp_ollama","choices":"#;
    let expected = [
        // Thinking alone: one delta with content "" (Ollama's toChunk keeps it).
        format!(r#"data: {head}[{{"index":0,"delta":{{"role":"assistant","content":"","reasoning":"hmm"}},"finish_reason":null}}]}}"#),
        // Thinking beside content: the reasoning first, without content (ToStreamChunks).
        format!(r#"data: {head}[{{"index":0,"delta":{{"reasoning":"!"}},"finish_reason":null}}]}}"#),
        format!(r#"data: {head}[{{"index":0,"delta":{{"content":"Hi"}},"finish_reason":null}}]}}"#),
        format!(r#"data: {head}[{{"index":0,"delta":{{}},"finish_reason":"stop"}}]}}"#),
        format!(r#"data: {head}[],"usage":{{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}}}"#),
        "data: [DONE]".to_owned(),
    ]
    .join("\n\n")
        + "\n\n";
    assert_eq!(out, expected);
}

#[test]
fn stream_without_output_still_sends_role_and_tool_calls_finish() {
    let mut f = ChunkFrames::new("c".into(), 1, false);
    let out = f.chunk(done("length"));
    let frames: Vec<Value> = out
        .split("\n\n")
        .filter(|s| !s.is_empty())
        .map(|s| serde_json::from_str(s.strip_prefix("data: ").unwrap()).unwrap())
        .collect();
    assert_eq!(frames.len(), 2, "no usage frame without include_usage");
    assert_eq!(
        frames[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    assert_eq!(frames[1]["choices"][0]["finish_reason"], json!("length"));

    let mut f = ChunkFrames::new("c".into(), 1, false);
    let mut c = chunk("", "");
    c.message.tool_calls = vec![ToolCall::default(), ToolCall::default()];
    // The native calls' own indexes, as Ollama's ToToolCalls copies them.
    c.message.tool_calls[1].function.index = 1;
    let out = f.chunk(c) + &f.chunk(done("stop"));
    let first: Value = serde_json::from_str(
        out.split("\n\n")
            .next()
            .unwrap()
            .strip_prefix("data: ")
            .unwrap(),
    )
    .unwrap();
    let delta = &first["choices"][0]["delta"];
    assert_eq!(delta["content"], json!(""), "{out}");
    let indexes: Vec<&Value> = (0..2).map(|i| &delta["tool_calls"][i]["index"]).collect();
    assert_eq!(indexes, [&json!(0), &json!(1)], "{out}");
    assert!(out.contains(r#""finish_reason":"tool_calls""#), "{out}");
    let e = f.error(&ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "boom",
    ));
    assert_eq!(e, "data: {\"error\":{\"message\":\"boom\",\"type\":\"api_error\",\"param\":null,\"code\":null}}\n\n");
}
