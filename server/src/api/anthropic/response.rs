//! Native chat replies in Anthropic's shapes: the `message` object (content blocks `thinking`,
//! `text`, `tool_use`; `stop_reason` `end_turn` | `max_tokens` | `tool_use`; usage) and the
//! event stream `message_start`, then per block `content_block_start` / `content_block_delta`
//! (`thinking_delta`, `text_delta`, `input_json_delta`) / `content_block_stop`, then
//! `message_delta` (stop reason, usage) and `message_stop`. Blocks are numbered in order; a
//! block is closed before the next kind opens.

use serde_json::{json, Value};

use crate::api::openai::common::random_id;
use crate::api::openai::error::{anthropic_body, ApiError};
use crate::api::openai::sse::{self, Frames};
use crate::api::types::{ChatResponse, ToolCall};

/// Native `done_reason` → Anthropic `stop_reason`: tool calls win, `stop` ends the turn,
/// `length` hit `max_tokens`, any other reason is a stop sequence; none is `null`.
pub fn stop_reason(done_reason: Option<&str>, called_tools: bool) -> Value {
    match done_reason {
        _ if called_tools => json!("tool_use"),
        Some("stop") => json!("end_turn"),
        Some("length") => json!("max_tokens"),
        Some(r) if !r.is_empty() => json!("stop_sequence"),
        _ => Value::Null,
    }
}

fn tool_id(c: &ToolCall) -> String {
    if c.id.is_empty() {
        random_id("toolu_", 24)
    } else {
        c.id.clone()
    }
}

/// The non-streamed `message` object.
pub fn message(r: &ChatResponse, id: &str) -> Value {
    let mut content = Vec::new();
    if !r.message.thinking.is_empty() {
        content.push(json!({"type": "thinking", "thinking": r.message.thinking, "signature": ""}));
    }
    if !r.message.content.is_empty() || (r.message.tool_calls.is_empty() && content.is_empty()) {
        content.push(json!({"type": "text", "text": r.message.content}));
    }
    for c in &r.message.tool_calls {
        content.push(
            json!({"type": "tool_use", "id": tool_id(c), "name": c.function.name,
                            "input": Value::Object(c.function.arguments.clone())}),
        );
    }
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": content,
        "stop_reason": stop_reason(r.done_reason.as_deref(), !r.message.tool_calls.is_empty()),
        "stop_sequence": null,
        "usage": {"input_tokens": r.metrics.prompt_eval_count, "output_tokens": r.metrics.eval_count},
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Thinking,
    Text,
}

/// Native chunks → Anthropic stream events.
pub struct EventFrames {
    id: String,
    started: bool,
    open: Option<Block>,
    next_index: usize,
    called_tools: bool,
}

impl EventFrames {
    pub fn new(id: String) -> EventFrames {
        EventFrames {
            id,
            started: false,
            open: None,
            next_index: 0,
            called_tools: false,
        }
    }

    fn close(&mut self) -> String {
        match self.open.take() {
            Some(_) => {
                let index = self.next_index - 1;
                sse::event(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": index}),
                )
            }
            None => String::new(),
        }
    }

    fn start(&mut self, block: Value) -> String {
        let index = self.next_index;
        self.next_index += 1;
        sse::event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        )
    }

    fn delta(&self, delta: Value) -> String {
        sse::event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": self.next_index - 1, "delta": delta}),
        )
    }

    /// Text into a block of `kind`, opening it (and closing another kind) first.
    fn text_into(&mut self, kind: Block, text: &str) -> String {
        let mut out = String::new();
        if self.open != Some(kind) {
            out += &self.close();
            out += &self.start(match kind {
                Block::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
                Block::Text => json!({"type": "text", "text": ""}),
            });
            self.open = Some(kind);
        }
        out += &self.delta(match kind {
            Block::Thinking => json!({"type": "thinking_delta", "thinking": text}),
            Block::Text => json!({"type": "text_delta", "text": text}),
        });
        out
    }
}

impl Frames<ChatResponse> for EventFrames {
    fn chunk(&mut self, c: ChatResponse) -> String {
        let mut out = String::new();
        if !self.started {
            self.started = true;
            // The first chunk carries the prompt's size (or, if it is also the last, the final
            // count); Anthropic's clients read input tokens from message_start.
            let input = c.metrics.prompt_announced.max(c.metrics.prompt_eval_count);
            let message = json!({
                "id": self.id, "type": "message", "role": "assistant", "model": c.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": input, "output_tokens": 0},
            });
            out += &sse::event(
                "message_start",
                &json!({"type": "message_start", "message": message}),
            );
        }
        if !c.message.thinking.is_empty() {
            out += &self.text_into(Block::Thinking, &c.message.thinking);
        }
        if !c.message.content.is_empty() {
            out += &self.text_into(Block::Text, &c.message.content);
        }
        for call in &c.message.tool_calls {
            self.called_tools = true;
            out += &self.close();
            out += &self.start(json!({"type": "tool_use", "id": tool_id(call), "name": call.function.name, "input": {}}));
            let args = crate::api::gomarshal::arguments_string(&call.function.arguments);
            out += &self.delta(json!({"type": "input_json_delta", "partial_json": args}));
            out += &sse::event(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": self.next_index - 1}),
            );
        }
        if c.done {
            out += &self.close();
            let reason = stop_reason(c.done_reason.as_deref(), self.called_tools);
            out += &sse::event(
                "message_delta",
                &json!({"type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": null},
                        "usage": {"input_tokens": c.metrics.prompt_eval_count, "output_tokens": c.metrics.eval_count}}),
            );
            out += &sse::event("message_stop", &json!({"type": "message_stop"}));
        }
        out
    }

    fn error(&mut self, e: &ApiError) -> String {
        sse::event("error", &anthropic_body(e))
    }

    fn finish(&mut self) -> String {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{Message, Metrics, ToolCallFunction};

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
                prompt_eval_count: 9,
                eval_count: 2,
                ..Metrics::default()
            },
            ..chunk("", "")
        }
    }

    #[test]
    fn message_shape() {
        let mut r = done("stop");
        r.message.content = "Hello".into();
        assert_eq!(
            serde_json::to_string(&message(&r, "msg_1")).unwrap(),
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"smollm2:latest","content":[{"type":"text","text":"Hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":9,"output_tokens":2}}"#
        );
        assert_eq!(message(&done("length"), "m")["stop_reason"], "max_tokens");
        assert_eq!(stop_reason(Some("unload"), false), json!("stop_sequence"));
        assert_eq!(stop_reason(None, false), Value::Null);
        assert_eq!(
            message(&done("stop"), "m")["content"],
            json!([{"type": "text", "text": ""}])
        );
        r.message.tool_calls = vec![ToolCall {
            id: "toolu_x".into(),
            function: ToolCallFunction {
                index: 0,
                name: "f".into(),
                arguments: serde_json::from_value(json!({"a": 1})).unwrap(),
            },
        }];
        let v = message(&r, "m");
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(
            v["content"][1],
            json!({"type": "tool_use", "id": "toolu_x", "name": "f", "input": {"a": 1}})
        );
    }

    #[test]
    fn event_stream_exact() {
        let mut f = EventFrames::new("msg_1".into());
        let out = f.chunk(chunk("", "hm"))
            + &f.chunk(chunk("Hi", ""))
            + &f.chunk(chunk(" there", ""))
            + &f.chunk(done("stop"))
            + &f.finish();
        let expected = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"smollm2:latest\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hm\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\" there\"}}\n\n",
            "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"input_tokens\":9,\"output_tokens\":2}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
        );
        assert_eq!(out, expected);
    }

    #[test]
    fn tool_use_events_and_errors() {
        let mut f = EventFrames::new("m".into());
        let mut c = chunk("", "");
        c.message.tool_calls = vec![ToolCall {
            id: "toolu_1".into(),
            function: ToolCallFunction {
                index: 0,
                name: "f".into(),
                arguments: serde_json::from_value(json!({"a": 1})).unwrap(),
            },
        }];
        let out = f.chunk(c) + &f.chunk(done("stop"));
        assert!(
            out.contains(
                r#""content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}"#
            ),
            "{out}"
        );
        assert!(
            out.contains(r#""delta":{"type":"input_json_delta","partial_json":"{\"a\":1}"}"#),
            "{out}"
        );
        assert!(out.contains(r#""stop_reason":"tool_use""#));
        let e = f.error(&ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "boom",
        ));
        let data: Value =
            serde_json::from_str(e.strip_prefix("event: error\ndata: ").unwrap().trim_end())
                .unwrap();
        assert_eq!(
            data["error"],
            json!({"type": "api_error", "message": "boom"})
        );
        assert_eq!(data["type"], "error");
    }
}
