//! The `/v1/responses` event stream (see `responses` module docs for the event list). At most
//! one output item is open at a time; switching between reasoning and text closes the open item
//! with its `*.done` events, and every tool call is a complete item of its own. The finished
//! items are kept so that `response.completed` carries the whole `output`.

use serde_json::{json, Value};

use super::{call_item, message_item, reasoning_item, response_object, usage, Echo, COMPLETED};
use crate::api::openai::common;
use crate::api::openai::error::ApiError;
use crate::api::openai::sse::{self, Frames};
use crate::api::types::ChatResponse;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
}

struct Open {
    kind: Kind,
    id: String,
    text: String,
}

pub struct EventFrames {
    id: String,
    created: i64,
    echo: Echo,
    model: String,
    seq: u64,
    started: bool,
    open: Option<Open>,
    done_items: Vec<Value>,
}

impl EventFrames {
    pub fn new(id: String, created: i64, echo: Echo) -> EventFrames {
        EventFrames {
            id,
            created,
            echo,
            model: String::new(),
            seq: 0,
            started: false,
            open: None,
            done_items: Vec::new(),
        }
    }

    fn ev(&mut self, name: &str, fields: Value) -> String {
        let mut v = json!({"type": name, "sequence_number": self.seq});
        self.seq += 1;
        if let (Some(o), Value::Object(f)) = (v.as_object_mut(), fields) {
            o.extend(f);
        }
        sse::event(name, &v)
    }

    fn snapshot(&self, status: &str, usage: Option<Value>) -> Value {
        response_object(
            &self.id,
            self.created,
            &self.echo,
            &self.model,
            status,
            self.done_items.clone(),
            usage,
        )
    }

    fn output_index(&self) -> usize {
        self.done_items.len()
    }

    fn close(&mut self) -> String {
        let Some(open) = self.open.take() else {
            return String::new();
        };
        let oi = self.output_index();
        let (id, text) = (open.id, open.text);
        let mut out = String::new();
        let item = match open.kind {
            Kind::Reasoning => {
                let part = json!({"type": "summary_text", "text": text});
                out += &self.ev(
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": oi, "summary_index": 0, "text": text}),
                );
                out += &self.ev(
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": oi, "summary_index": 0, "part": part}),
                );
                reasoning_item(&id, &text)
            }
            Kind::Message => {
                let part =
                    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
                out += &self.ev("response.output_text.done", json!({"item_id": id, "output_index": oi, "content_index": 0, "text": text, "logprobs": []}));
                out += &self.ev(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": oi, "content_index": 0, "part": part}),
                );
                message_item(&id, "completed", Some(&text))
            }
        };
        out += &self.ev(
            "response.output_item.done",
            json!({"output_index": oi, "item": item}),
        );
        self.done_items.push(item);
        out
    }

    fn text(&mut self, kind: Kind, delta: &str) -> String {
        let mut out = String::new();
        if self.open.as_ref().map(|o| o.kind) != Some(kind) {
            out += &self.close();
            let oi = self.output_index();
            let id = match kind {
                Kind::Reasoning => common::random_id("rs_", 24),
                Kind::Message => common::random_id("msg_", 24),
            };
            match kind {
                Kind::Reasoning => {
                    out += &self.ev("response.output_item.added", json!({"output_index": oi, "item": {"id": id, "type": "reasoning", "summary": []}}));
                    out += &self.ev("response.reasoning_summary_part.added", json!({"item_id": id, "output_index": oi, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}));
                }
                Kind::Message => {
                    out += &self.ev(
                        "response.output_item.added",
                        json!({"output_index": oi, "item": message_item(&id, "in_progress", None)}),
                    );
                    out += &self.ev("response.content_part.added", json!({"item_id": id, "output_index": oi, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": [], "logprobs": []}}));
                }
            }
            self.open = Some(Open {
                kind,
                id,
                text: String::new(),
            });
        }
        let oi = self.output_index();
        let Some(open) = self.open.as_mut() else {
            return out;
        };
        open.text.push_str(delta);
        let id = open.id.clone();
        out += &match kind {
            Kind::Reasoning => self.ev("response.reasoning_summary_text.delta", json!({"item_id": id, "output_index": oi, "summary_index": 0, "delta": delta})),
            Kind::Message => self.ev("response.output_text.delta", json!({"item_id": id, "output_index": oi, "content_index": 0, "delta": delta, "logprobs": []})),
        };
        out
    }
}

impl Frames<ChatResponse> for EventFrames {
    fn chunk(&mut self, c: ChatResponse) -> String {
        let mut out = String::new();
        if !self.started {
            self.started = true;
            self.model.clone_from(&c.model);
            let r = self.snapshot("in_progress", None);
            out += &self.ev("response.created", json!({"response": r}));
            out += &self.ev("response.in_progress", json!({"response": r}));
        }
        if !c.message.thinking.is_empty() {
            out += &self.text(Kind::Reasoning, &c.message.thinking);
        }
        if !c.message.content.is_empty() {
            out += &self.text(Kind::Message, &c.message.content);
        }
        for call in &c.message.tool_calls {
            out += &self.close();
            let oi = self.output_index();
            let id = common::random_id("fc_", 24);
            let args = crate::api::gomarshal::arguments_string(&call.function.arguments);
            let added = call_item(&id, "in_progress", call, "");
            let call_id = added["call_id"].clone();
            out += &self.ev(
                "response.output_item.added",
                json!({"output_index": oi, "item": added}),
            );
            out += &self.ev(
                "response.function_call_arguments.delta",
                json!({"item_id": id, "output_index": oi, "delta": args}),
            );
            out += &self.ev(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": oi, "arguments": args}),
            );
            let mut item = call_item(&id, "completed", call, &args);
            item["call_id"] = call_id;
            out += &self.ev(
                "response.output_item.done",
                json!({"output_index": oi, "item": item}),
            );
            self.done_items.push(item);
        }
        if c.done {
            out += &self.close();
            let r = self.snapshot(COMPLETED, Some(usage(&c)));
            out += &self.ev("response.completed", json!({"response": r}));
        }
        out
    }

    fn error(&mut self, e: &ApiError) -> String {
        let mut r = self.snapshot("failed", None);
        r["error"] = json!({"code": "server_error", "message": e.message});
        self.ev("response.failed", json!({"response": r}))
    }

    fn finish(&mut self) -> String {
        String::new()
    }
}
