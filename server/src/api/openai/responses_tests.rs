//! Shape tests for the Responses translation.

use super::*;
use crate::api::openai::sse::Frames;
use crate::api::types::{Metrics, ToolCallFunction};
use serde_json::Map;

fn req(v: Value) -> ResponsesRequest {
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

#[test]
fn input_items_become_messages() {
    let (n, echo) = to_native(req(json!({
        "model": "smollm2", "instructions": "be brief", "max_output_tokens": 16,
        "reasoning": {"effort": "high"}, "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "find"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "shown"}],
             "encrypted_content": "think"},
            {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"q\":\"x\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "found"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}
        ]
    })))
    .unwrap();
    assert_eq!(n.think, Some(json!("high")));
    assert_eq!(n.format, Some(json!({"type": "object"})));
    assert_eq!(n.tools[0].function.name, "lookup");
    assert_eq!(n.options.as_ref().unwrap()["num_predict"], json!(16));
    let wire = crate::api::types::wire(&n.messages);
    assert_eq!(
        wire,
        vec![
            json!({"role": "system", "content": "be brief"}),
            json!({"role": "user", "content": "find"}),
            json!({"role": "assistant", "content": "", "thinking": "think",
                   "tool_calls": [{"id": "call_1", "function": {"index": 0, "name": "lookup", "arguments": {"q": "x"}}}]}),
            json!({"role": "tool", "content": "found", "tool_call_id": "call_1"}),
            json!({"role": "assistant", "content": "done"}),
        ]
    );
    assert_eq!(echo.instructions.as_deref(), Some("be brief"));
    let (n, _) = to_native(req(json!({"model": "m", "input": "hi"}))).unwrap();
    assert_eq!(
        serde_json::to_value(&n.messages).unwrap(),
        json!([{"role": "user", "content": "hi"}])
    );
    assert_eq!(n.stream, Some(false));
}

/// Ollama's `FromResponsesRequest` merges: a call joins the assistant text before it, an
/// assistant message replayed between a call and its output stays in the call's turn, parts
/// are concatenated as they are, and trailing reasoning is an assistant turn of its own.
#[test]
fn input_items_merge_as_ollama_merges_them() {
    let msgs = |input: Value| {
        let (n, _) = to_native(req(json!({"model": "m", "input": input}))).unwrap();
        serde_json::to_value(&n.messages).unwrap()
    };
    let call =
        |id: &str| json!({"type": "function_call", "call_id": id, "name": "f", "arguments": ""});
    let text = |role: &str, t: &str| json!({"role": role, "content": [{"type": "output_text", "text": t}]});
    assert_eq!(
        msgs(
            json!([text("user", "q"), text("assistant", "Let me check"), call("c1"),
            {"type": "function_call_output", "call_id": "c1", "output": "r"}])
        ),
        json!([{"role": "user", "content": "q"},
            {"role": "assistant", "content": "Let me check",
             "tool_calls": [{"id": "c1", "function": {"index": 0, "name": "f", "arguments": {}}}]},
            {"role": "tool", "content": "r", "tool_call_id": "c1"}])
    );
    assert_eq!(
        msgs(json!([call("c1"), text("assistant", "working"),
            {"type": "function_call_output", "call_id": "c1", "output": "r"}])),
        json!([{"role": "assistant", "content": "working",
             "tool_calls": [{"id": "c1", "function": {"index": 0, "name": "f", "arguments": {}}}]},
            {"role": "tool", "content": "r", "tool_call_id": "c1"}])
    );
    assert_eq!(
        msgs(
            json!([{"role": "user", "content": [{"type": "input_text", "text": "A"},
            {"type": "input_text", "text": "B"}]},
            {"type": "reasoning", "summary": [], "encrypted_content": "hm"}])
        ),
        json!([{"role": "user", "content": "AB"}, {"role": "assistant", "content": "", "thinking": "hm"}])
    );
    let err = |input: Value| {
        to_native(req(json!({"model": "m", "input": input})))
            .unwrap_err()
            .message
    };
    assert!(
        err(json!([{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{"}]))
            .starts_with("failed to parse function call arguments: ")
    );
    assert_eq!(
        err(json!([{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}])),
        "file inputs are not currently supported"
    );
}

#[test]
fn bad_inputs() {
    let err = |v: Value| to_native(req(v)).unwrap_err();
    assert_eq!(err(json!({"model": "m"})).message, "input is required");
    assert_eq!(
        err(json!({"model": "m", "input": "x", "previous_response_id": "resp_1"})).status,
        400
    );
    assert_eq!(
        err(json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]})).status,
        400
    );
    assert_eq!(
        err(json!({"model": "m", "input": [{"type": "computer_call"}]})).message,
        "input[0]: unknown input item type: \"computer_call\""
    );
    assert_eq!(
        err(json!({"model": "m", "input": [{"content": "x"}]})).message,
        "input[0]: input item missing required 'type' field"
    );
    assert_eq!(
        err(json!({"model": "m", "input": [{"role": "user", "content": [{"type": "audio"}]}]}))
            .message,
        "unknown content type: audio"
    );
    let e = err(
        json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x/y.png"}]}]}),
    );
    assert!(e.message.contains("image URLs are not currently supported"));
}

#[test]
fn non_streamed_response() {
    let mut r = chunk("Hello", "hm");
    r.done = true;
    r.done_reason = Some("stop".into());
    r.metrics = Metrics {
        prompt_eval_count: 3,
        eval_count: 2,
        ..Metrics::default()
    };
    let out = output_items(&r);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(
        out[0]["summary"],
        json!([{"type": "summary_text", "text": "hm"}])
    );
    assert!(out[1]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(
        out[1]["content"],
        json!([{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}])
    );
    let echo = Echo {
        model: "smollm2".into(),
        temperature: 1.0,
        top_p: 1.0,
        tools: json!([]),
        ..Echo::default()
    };
    let v = response_object(
        "resp_1",
        7,
        &echo,
        &r.model,
        "completed",
        out,
        Some(usage(&r)),
    );
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["model"], "smollm2:latest");
    assert_eq!(v["incomplete_details"], Value::Null);
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 3, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 5})
    );
    let v = response_object("r", 7, &echo, "", COMPLETED, vec![], None);
    assert_eq!(
        (
            v["status"].clone(),
            v["incomplete_details"].clone(),
            v["model"].clone()
        ),
        (json!("completed"), Value::Null, json!("smollm2"))
    );
}

fn events(out: &str) -> Vec<(String, Value)> {
    out.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            let (ev, data) = f.split_once('\n').unwrap();
            let name = ev.strip_prefix("event: ").unwrap().to_owned();
            let v: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(v["type"], json!(name), "type matches the event name");
            (name, v)
        })
        .collect()
}

#[test]
fn event_stream_order_and_sequence() {
    let mut f = EventFrames::new("resp_1".into(), 7, Echo::default());
    let mut done = chunk("", "");
    done.done = true;
    done.done_reason = Some("stop".into());
    done.metrics = Metrics {
        prompt_eval_count: 3,
        eval_count: 2,
        ..Metrics::default()
    };
    let mut call = chunk("", "");
    call.message.tool_calls = vec![ToolCall {
        id: "call_9".into(),
        function: ToolCallFunction {
            index: 0,
            name: "f".into(),
            arguments: Map::new(),
        },
    }];
    let out = f.chunk(chunk("", "hm"))
        + &f.chunk(chunk("Hel", ""))
        + &f.chunk(chunk("lo", ""))
        + &f.chunk(call)
        + &f.chunk(done)
        + &f.finish();
    let evs = events(&out);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    for (i, (_, v)) in evs.iter().enumerate() {
        assert_eq!(v["sequence_number"], json!(i));
    }
    assert_eq!(evs[0].1["response"]["status"], "in_progress");
    assert_eq!(evs[12].1["text"], "Hello");
    assert_eq!(evs[12].1["output_index"], 1);
    assert_eq!(evs[18].1["item"]["call_id"], "call_9");
    assert_eq!(evs[18].1["item"]["arguments"], "{}");
    let completed = &evs[19].1["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["output"].as_array().unwrap().len(), 3);
    assert_eq!(completed["output"][1]["content"][0]["text"], "Hello");
    assert_eq!(completed["usage"]["total_tokens"], 5);
    let failed = f.error(&ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "boom",
    ));
    let evs = events(&failed);
    assert_eq!(evs[0].0, "response.failed");
    assert_eq!(evs[0].1["response"]["error"]["message"], "boom");
}

/// Ollama's reasoning items carry the thinking as `encrypted_content` (non-streamed output, the
/// streamed `output_item.done` and `response.completed`), and a client that replays the item
/// gets that thinking back on the assistant turn (responses_test.go
/// TestToResponse_WithReasoning, TestResponsesStreamConverter_Reasoning).
#[test]
fn reasoning_items_round_trip_their_thinking() {
    let mut r = chunk("42", "Analyzing");
    r.done = true;
    let out = output_items(&r);
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(out[0]["encrypted_content"], "Analyzing");

    let mut f = EventFrames::new("resp_1".into(), 7, Echo::default());
    let mut done = chunk("", "");
    done.done = true;
    let evs =
        events(&(f.chunk(chunk("", "Let me ")) + &f.chunk(chunk("", "think")) + &f.chunk(done)));
    let item_done = evs
        .iter()
        .find(|(n, v)| n == "response.output_item.done" && v["item"]["type"] == "reasoning")
        .expect("the reasoning item is closed");
    assert_eq!(item_done.1["item"]["encrypted_content"], "Let me think");
    let completed = &evs.last().unwrap().1["response"]["output"][0];
    assert_eq!(completed["encrypted_content"], "Let me think");

    // The finished output replayed as the next request's input.
    let mut input = vec![json!({"role": "user", "content": "q"})];
    input.extend(out);
    input.push(json!({"role": "user", "content": "and?"}));
    let (n, _) = to_native(req(json!({"model": "m", "input": input}))).unwrap();
    assert_eq!(
        serde_json::to_value(&n.messages).unwrap(),
        json!([{"role": "user", "content": "q"},
               {"role": "assistant", "content": "42", "thinking": "Analyzing"},
               {"role": "user", "content": "and?"}])
    );
}

/// A `function_call_output` given as content parts keeps its text and its images on the tool
/// message (TestFromResponsesRequest_FunctionCallOutputContentArray{,WithImage}).
#[test]
fn function_call_output_parts_keep_images() {
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
    let (n, _) = to_native(req(json!({"model": "m", "input": [
        {"role": "user", "content": "inspect"},
        {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "attached"},
            {"type": "input_image", "detail": "auto", "image_url": format!("data:image/png;base64,{png}")}]},
        {"type": "function_call_output", "call_id": "c1", "output": [
            {"type": "input_text", "text": "sunny"}, {"type": "output_text", "text": ", 72F"}]}
    ]})))
    .unwrap();
    let tool = &n.messages[2];
    assert_eq!(
        (
            tool.role.as_str(),
            tool.content.as_str(),
            tool.tool_call_id.as_str()
        ),
        ("tool", "attached", "c1")
    );
    assert_eq!(tool.images, vec![png.to_owned()]);
    assert_eq!(n.messages[3].content, "sunny, 72F");
    assert!(n.messages[3].images.is_empty());
}

/// A `namespace` tool expands to its member functions named `<namespace>.<member>`, an already
/// qualified member is not prefixed twice, and plain functions pass through
/// (TestFromResponsesRequest_NamespaceTools). The echo keeps the declaration as sent.
#[test]
fn namespace_tools_expand_to_qualified_functions() {
    let tools = json!([
        {"type": "namespace", "name": "muse", "description": "Muse tools", "tools": [
            {"type": "function", "name": "bash", "description": "Runs a shell command", "strict": true,
             "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}},
            {"type": "function", "name": "muse.read_file", "parameters": {"type": "object"}},
            {"type": "namespace", "name": "fs", "tools": [{"type": "function", "name": "ls"}]}
        ]},
        {"type": "function", "name": "plain", "parameters": {"type": "object"}}
    ]);
    let (n, echo) = to_native(req(
        json!({"model": "m", "input": "hi", "tools": tools.clone()}),
    ))
    .unwrap();
    let names: Vec<&str> = n.tools.iter().map(|t| t.function.name.as_str()).collect();
    assert_eq!(
        names,
        ["muse.bash", "muse.read_file", "muse.fs.ls", "plain"]
    );
    assert_eq!(n.tools[0].kind, "function");
    assert_eq!(n.tools[0].function.description, "Runs a shell command");
    assert_eq!(
        n.tools[0].function.parameters["required"],
        json!(["command"])
    );
    assert_eq!(echo.tools, tools);
    // A member that is not a function is refused like a top-level one.
    let bad = json!([{"type": "namespace", "name": "x", "tools": [{"type": "computer"}]}]);
    assert_eq!(
        to_native(req(json!({"model": "m", "input": "hi", "tools": bad})))
            .unwrap_err()
            .status,
        400
    );
}

/// An empty `type` is no type: a message when the item has a role, else the missing-type
/// error (TestUnmarshalResponsesInputItem "empty type field").
#[test]
fn empty_item_type_is_no_type() {
    let (n, _) = to_native(req(
        json!({"model": "m", "input": [{"type": "", "role": "user", "content": "hi"}]}),
    ))
    .unwrap();
    assert_eq!(n.messages[0].content, "hi");
    for item in [json!({"type": ""}), json!({"type": null, "role": ""})] {
        assert_eq!(
            to_native(req(json!({"model": "m", "input": [item.clone()]})))
                .unwrap_err()
                .message,
            "input[0]: input item missing required 'type' field",
            "{item}"
        );
    }
}

#[test]
fn replayed_web_search_calls_are_skipped() {
    // History from a client that used OpenAI's hosted web search (Ollama skips these items).
    let (n, _) = to_native(req(json!({"model": "m", "input": [
        {"role": "user", "content": "news?"},
        {"type": "reasoning", "encrypted_content": "look it up"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed",
         "action": {"type": "search", "query": "news"}},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Here is the news."}]},
        {"role": "user", "content": "thanks"}
    ]})))
    .unwrap();
    let shape: Vec<_> = n
        .messages
        .iter()
        .map(|m| (m.role.as_str(), m.content.as_str(), m.thinking.as_str()))
        .collect();
    assert_eq!(
        shape,
        [
            ("user", "news?", ""),
            ("assistant", "Here is the news.", "look it up"),
            ("user", "thanks", "")
        ]
    );
    // A mistyped item is still refused, as Ollama's decoding does; other hosted-tool calls
    // remain unknown item types.
    let err = |item: Value| {
        to_native(req(
            json!({"model": "m", "input": [{"role": "user", "content": "x"}, item]}),
        ))
        .unwrap_err()
    };
    let e = err(json!({"type": "web_search_call", "action": "search"}));
    assert_eq!(e.status, 400);
    assert!(e.message.starts_with("input[1]: invalid web_search_call: "));
    assert_eq!(
        err(json!({"type": "file_search_call", "id": "fs_1"})).message,
        "input[1]: unknown input item type: \"file_search_call\""
    );
}

#[test]
fn json_schema_format_without_schema_is_ignored() {
    let native = |format: Value| {
        to_native(req(
            json!({"model": "m", "input": "x", "text": {"format": format}}),
        ))
        .unwrap()
        .0
        .format
    };
    assert_eq!(native(json!({"type": "json_schema", "name": "x"})), None);
    assert_eq!(
        native(json!({"type": "json_schema", "name": "x", "schema": null})),
        None
    );
    assert_eq!(
        native(json!({"type": "json_schema", "schema": {"type": "object"}})),
        Some(json!({"type": "object"}))
    );
}

/// `text.format: {"type": "json_object"}` leaves the output unconstrained (Ollama's
/// FromResponsesRequest maps only `json_schema`), unlike chat completions' `response_format`,
/// and the response echoes the format as sent.
#[test]
fn json_object_text_format_is_echoed_not_applied() {
    let (n, echo) = to_native(req(json!({
        "model": "m", "input": "x", "text": {"format": {"type": "json_object"}}
    })))
    .unwrap();
    assert_eq!(n.format, None);
    let v = response_object("r", 7, &echo, "m", "completed", vec![], None);
    assert_eq!(v["text"], json!({"format": {"type": "json_object"}}));
    for format in [json!({"type": "text"}), json!({"type": "nonsense"})] {
        let (n, _) = to_native(req(
            json!({"model": "m", "input": "x", "text": {"format": format}}),
        ))
        .unwrap();
        assert_eq!(n.format, None, "{format}");
    }
}

#[test]
fn truncation_and_background_are_echoed() {
    let echoed = |extra: Value| {
        let mut body = json!({"model": "m", "input": "x"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (_, echo) = to_native(req(body)).unwrap();
        let v = response_object("r", 7, &echo, "m", "completed", vec![], None);
        (v["truncation"].clone(), v["background"].clone())
    };
    assert_eq!(echoed(json!({})), (json!("disabled"), json!(false)));
    assert_eq!(
        echoed(json!({"truncation": null, "background": null})),
        (json!("disabled"), json!(false))
    );
    assert_eq!(
        echoed(json!({"truncation": "auto", "background": true})),
        (json!("auto"), json!(true))
    );
    // The streamed response objects echo them too.
    let (_, echo) = to_native(req(
        json!({"model": "m", "input": "x", "truncation": "auto", "background": true}),
    ))
    .unwrap();
    let mut f = EventFrames::new("resp_1".into(), 7, echo);
    let evs = events(&f.chunk(chunk("hi", "")));
    let created = &evs[0].1["response"];
    assert_eq!(evs[0].0, "response.created");
    assert_eq!(
        (&created["truncation"], &created["background"]),
        (&json!("auto"), &json!(true))
    );
}

#[test]
fn web_search_tool_is_a_clear_400() {
    // Ollama runs the hosted web_search tool through its cloud; herd has none.
    let e = to_native(req(json!({"model": "m", "input": "x", "tools": [
        {"type": "function", "name": "lookup"}, {"type": "web_search"}
    ]})))
    .unwrap_err();
    assert_eq!(e.status, 400);
    assert_eq!(
        e.message,
        "invalid tool definition at tools[1]: unsupported type 'web_search' (only 'function' is supported)"
    );
}

/// A refused tool is named by the client's own index: a namespace before it expands into
/// several functions but still counts as one item, and a refused namespace member is named by
/// its path inside the namespace.
#[test]
fn refused_tool_index_is_the_clients() {
    let refused = |tools: Value| {
        let e = to_native(req(json!({"model": "m", "input": "x", "tools": tools}))).unwrap_err();
        assert_eq!(e.status, 400);
        e.message
    };
    let ns = json!({"type": "namespace", "name": "fs", "tools": [
        {"type": "function", "name": "ls"}, {"type": "function", "name": "cat"},
        {"type": "namespace", "name": "git", "tools": [{"type": "function", "name": "log"}]}
    ]});
    assert_eq!(
        refused(json!([ns, {"type": "web_search"}])),
        "invalid tool definition at tools[1]: unsupported type 'web_search' (only 'function' is supported)"
    );
    assert_eq!(
        refused(json!([ns, {"type": "function", "name": "f"}, {"type": "web_search"}])),
        "invalid tool definition at tools[2]: unsupported type 'web_search' (only 'function' is supported)"
    );
    assert_eq!(
        refused(json!([{"type": "function", "name": "f"}, {"type": "namespace", "name": "x", "tools": [
            {"type": "function", "name": "ok"},
            {"type": "namespace", "name": "y", "tools": [{"type": "function", "name": "a"}, {"type": "web_search"}]}
        ]}])),
        "invalid tool definition at tools[1].tools[1].tools[1]: unsupported type 'web_search' (only 'function' is supported)"
    );
    assert_eq!(
        refused(json!([ns, {"type": "function", "name": ""}])),
        "invalid tool definition at tools[1]: 'name' must be a non-empty string"
    );
}
