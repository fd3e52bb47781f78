//! `POST /v1/chat/completions`: an OpenAI chat request becomes a native `ChatRequest` (content
//! parts flattened, data-URI images as native base64, tool-call argument strings parsed, tool
//! results named after their call, OpenAI sampling defaults, `response_format` → `format`,
//! reasoning effort → `think`), runs through the native `/api/chat` handler, and the native reply
//! or chunks are rewritten as `chat.completion` / `chat.completion.chunk` objects.
//!
//! Stream shape: every content/thinking/tool-call delta is its own chunk (a native chunk holding
//! both thinking and content becomes two), the first carries `delta.role`, all share one `id`
//! and `created`; then a `delta: {}` chunk with `finish_reason`; then, with
//! `stream_options.include_usage`, a `choices: []` chunk with `usage`; then `data: [DONE]`.

use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::common::{self, Sampling};
use super::error::{openai_body, openai_response, ApiError};
use super::native::{self, Reply};
use super::sse::{self, Frames};
use crate::api::types::{ChatRequest, ChatResponse, Message, ToolCall, ToolCallFunction};
use crate::api::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Option<Vec<InMessage>>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    #[serde(flatten)]
    pub sampling: Sampling,
    pub max_tokens: Option<i64>,
    pub max_completion_tokens: Option<i64>,
    pub response_format: Option<Value>,
    pub tools: Option<Value>,
    pub reasoning_effort: Option<String>,
    pub reasoning: Option<Reasoning>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    /// Ollama's extension: render the prompt only and return it in `_debug_info`.
    #[serde(rename = "_debug_render_only")]
    pub debug_render_only: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct StreamOptions {
    pub include_usage: bool,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct Reasoning {
    pub effort: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct InMessage {
    pub role: String,
    pub content: Option<Value>,
    pub reasoning: Option<String>,
    pub tool_calls: Option<Vec<InToolCall>>,
    pub tool_call_id: Option<String>,
    pub name: Option<String>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct InToolCall {
    pub id: Option<String>,
    pub function: InFunction,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(default)]
pub struct InFunction {
    pub name: String,
    pub arguments: Option<Value>,
}

pub async fn chat_completions(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(state, body).await {
        Ok(r) => r,
        Err(e) => openai_response(&e),
    }
}

async fn run(state: AppState, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: ChatCompletionRequest = common::decode(body)?;
    let streaming = req.stream.unwrap_or(false);
    let include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
    let native_req = to_native(req)?;
    let reply = native::chat(&state, native_req).await?;
    let id = common::short_id("chatcmpl-");
    let created = common::unix_now();
    if streaming {
        let frames = ChunkFrames::new(id, created, include_usage);
        return Ok(sse::response(reply.into_stream(), frames));
    }
    let r = match reply {
        Reply::One(r) => r,
        Reply::Stream(s) => fold(s).await?,
    };
    Ok(Json(completion(&r, &id, created)).into_response())
}

/// Folds native chunks into one reply (used only if a native handler streamed anyway).
pub async fn fold(mut s: native::NativeStream<ChatResponse>) -> Result<ChatResponse, ApiError> {
    use futures_util::StreamExt;
    let mut acc: Option<ChatResponse> = None;
    while let Some(c) = s.next().await {
        let c = c?;
        match acc.as_mut() {
            None => acc = Some(c),
            Some(a) => {
                a.message.content.push_str(&c.message.content);
                a.message.thinking.push_str(&c.message.thinking);
                a.message.tool_calls.extend(c.message.tool_calls);
                a.logprobs.extend(c.logprobs);
                a.done = c.done;
                a.done_reason = c.done_reason;
                a.metrics = c.metrics;
            }
        }
    }
    acc.ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "the model produced no response",
        )
    })
}

/// The native request for an OpenAI chat request.
pub fn to_native(req: ChatCompletionRequest) -> Result<ChatRequest, ApiError> {
    let messages = req.messages.unwrap_or_default();
    if messages.is_empty() {
        return Err(ApiError::bad_request("[] is too short - 'messages'"));
    }
    // A `reasoning` object wins over `reasoning_effort`, even without an effort (Ollama).
    let effort = match &req.reasoning {
        Some(r) => r.effort.as_deref(),
        None => req.reasoning_effort.as_deref(),
    };
    let options = common::options(
        &req.sampling,
        req.max_tokens.or(req.max_completion_tokens),
        common::Dialect::Chat,
    )?;
    Ok(ChatRequest {
        model: req.model,
        messages: messages_to_native(messages)?,
        stream: Some(req.stream.unwrap_or(false)),
        format: response_format(req.response_format.as_ref()),
        tools: common::chat_tools(req.tools.as_ref())?,
        options: Some(options),
        think: common::think(effort)?,
        logprobs: req.logprobs.unwrap_or(false),
        top_logprobs: req.top_logprobs.unwrap_or(0),
        debug_render_only: req.debug_render_only,
        ..ChatRequest::default()
    })
}

/// `response_format` → native `format`: `json_object` is `"json"`, `json_schema` its schema
/// (type names trimmed and case-insensitive); anything else asks for no format, as in Ollama.
pub fn response_format(v: Option<&Value>) -> Option<Value> {
    let v = v?;
    let kind = v.get("type").and_then(Value::as_str)?.trim().to_lowercase();
    match kind.as_str() {
        "json_object" => Some(json!("json")),
        "json_schema" => v
            .get("json_schema")
            .and_then(|s| s.get("schema"))
            .filter(|s| !s.is_null())
            .cloned(),
        _ => None,
    }
}

/// Messages in native form. Tool results take the name of the call they answer.
pub fn messages_to_native(ms: Vec<InMessage>) -> Result<Vec<Message>, ApiError> {
    let mut names: HashMap<String, String> = HashMap::new();
    let mut out = Vec::with_capacity(ms.len());
    for m in ms {
        let role = match m.role.to_lowercase().as_str() {
            // OpenAI's newer name for the system role.
            "developer" => "system".to_owned(),
            r => r.to_owned(),
        };
        let no_calls = m.tool_calls.as_ref().is_none_or(Vec::is_empty);
        if no_calls && m.content.as_ref().is_none_or(Value::is_null) {
            // Content may be left out only by a message that carries tool calls.
            return Err(ApiError::bad_request("invalid message content type: <nil>"));
        }
        // Content parts become one message each, as in Ollama: the renderer joins consecutive
        // same-role messages again (`collate`), an image's marker after the text before it.
        let mut parts = parts(m.content.as_ref())?;
        let mut msg = parts.pop().unwrap_or_default();
        for p in parts {
            out.push(Message {
                role: role.clone(),
                ..p
            });
        }
        msg.role = role;
        msg.thinking = m.reasoning.unwrap_or_default();
        for (i, tc) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let arguments = match tc.function.arguments {
                None | Some(Value::Null) => Default::default(),
                Some(Value::String(s)) => common::parse_arguments(&s)?,
                Some(Value::Object(o)) => o,
                Some(_) => return Err(ApiError::bad_request("invalid tool call arguments")),
            };
            let id = tc.id.unwrap_or_default();
            if !id.is_empty() {
                names.insert(id.clone(), tc.function.name.clone());
            }
            msg.tool_calls.push(ToolCall {
                id,
                function: ToolCallFunction {
                    index: i as i64,
                    name: tc.function.name,
                    arguments,
                },
            });
        }
        if msg.role == "tool" {
            msg.tool_call_id = m.tool_call_id.unwrap_or_default();
            msg.tool_name = m
                .name
                .filter(|n| !n.is_empty())
                .or_else(|| names.get(&msg.tool_call_id).cloned())
                .unwrap_or_default();
        }
        out.push(msg);
    }
    Ok(out)
}

/// A message's content as the native messages Ollama makes of it: one for a string (or none),
/// one per part — a `text` part's text, an `image_url` part's image — for an array. Role, tool
/// calls and thinking are the caller's.
fn parts(v: Option<&Value>) -> Result<Vec<Message>, ApiError> {
    let Some(Value::Array(parts)) = v else {
        let (content, images) = content(v)?;
        return Ok(vec![Message {
            content,
            images,
            ..Message::default()
        }]);
    };
    parts
        .iter()
        .map(|p| {
            Ok(match part(p)? {
                Part::Text(content) => Message {
                    content,
                    ..Message::default()
                },
                Part::Image(image) => Message {
                    images: vec![image],
                    ..Message::default()
                },
            })
        })
        .collect()
}

/// One content part: its text, or its image's base64 payload.
enum Part {
    Text(String),
    Image(String),
}

fn part(p: &Value) -> Result<Part, ApiError> {
    match p.get("type").and_then(Value::as_str) {
        Some("text") | Some("input_text") => match p.get("text") {
            Some(Value::String(t)) => Ok(Part::Text(t.clone())),
            _ => Err(ApiError::bad_request("invalid message format")),
        },
        Some("image_url") => {
            let url = match p.get("image_url") {
                Some(Value::String(s)) => s.as_str(),
                Some(o) => o.get("url").and_then(Value::as_str).unwrap_or_default(),
                None => "",
            };
            Ok(Part::Image(data_uri_image(url)?))
        }
        Some("input_audio") => Err(ApiError::bad_request("audio input is not supported")),
        _ => Err(ApiError::bad_request("invalid message format")),
    }
}

/// Message content: a string, or parts (`text`, `image_url` with a data URI). Text parts are
/// joined with a blank line, the way a Go template joins consecutive same-role messages.
pub fn content(v: Option<&Value>) -> Result<(String, Vec<String>), ApiError> {
    match v {
        None | Some(Value::Null) => Ok((String::new(), Vec::new())),
        Some(Value::String(s)) => Ok((s.clone(), Vec::new())),
        Some(Value::Array(parts)) => {
            let (mut texts, mut images) = (Vec::new(), Vec::new());
            for p in parts {
                match part(p)? {
                    Part::Text(t) => texts.push(t),
                    Part::Image(i) => images.push(i),
                }
            }
            Ok((texts.join("\n\n"), images))
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid message content type: {}",
            common::go_type(other)
        ))),
    }
}

/// The base64 payload of an image data URI (`data:image/{jpeg,jpg,png,webp};base64,` or
/// `data:;base64,`). Remote URLs are refused: the server never fetches on a client's behalf.
pub fn data_uri_image(url: &str) -> Result<String, ApiError> {
    use base64::Engine as _;
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Err(ApiError::bad_request(
            "image URLs are not currently supported, please use base64 encoded data instead",
        ));
    }
    const PREFIXES: [&str; 5] = [
        "data:image/jpeg;base64,",
        "data:image/jpg;base64,",
        "data:image/png;base64,",
        "data:image/webp;base64,",
        "data:;base64,",
    ];
    let payload = PREFIXES
        .iter()
        .find_map(|p| url.strip_prefix(p))
        .ok_or_else(|| ApiError::bad_request("invalid image input"))?;
    base64::engine::general_purpose::STANDARD
        .decode(payload)
        .map_err(|_| ApiError::bad_request("invalid image input"))?;
    Ok(payload.to_owned())
}

fn called_tools(r: &ChatResponse) -> bool {
    !r.message.tool_calls.is_empty()
}

/// The non-streamed `chat.completion` body.
pub fn completion(r: &ChatResponse, id: &str, created: i64) -> Value {
    let mut message = json!({"role": "assistant", "content": r.message.content});
    if !r.message.thinking.is_empty() {
        message["reasoning"] = json!(r.message.thinking);
    }
    if called_tools(r) {
        let calls: Vec<Value> = r.message.tool_calls.iter().map(common::tool_call).collect();
        message["tool_calls"] = Value::Array(calls);
    }
    let mut choice = json!({
        "index": 0,
        "message": message,
        "finish_reason": common::finish_reason(r.done_reason.as_deref(), called_tools(r)),
    });
    if let Some(lp) = common::logprobs(&r.logprobs) {
        choice["logprobs"] = lp;
    }
    let mut v = json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": r.model,
        "system_fingerprint": "fp_ollama",
        "choices": [choice],
        "usage": common::usage(r.metrics.prompt_eval_count, r.metrics.eval_count),
    });
    if let Some(d) = &r.debug_info {
        v["_debug_info"] = serde_json::to_value(d).unwrap_or(Value::Null);
    }
    v
}

/// Native chat chunks → `chat.completion.chunk` frames (see module docs).
pub struct ChunkFrames {
    id: String,
    created: i64,
    include_usage: bool,
    model: String,
    role_sent: bool,
    /// A delta has carried tool calls (the finish reason is then `tool_calls`).
    called: bool,
}

impl ChunkFrames {
    pub fn new(id: String, created: i64, include_usage: bool) -> ChunkFrames {
        ChunkFrames {
            id,
            created,
            include_usage,
            model: String::new(),
            role_sent: false,
            called: false,
        }
    }

    fn frame(&self, choices: Value, usage: Option<Value>) -> String {
        let mut v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_ollama",
            "choices": choices,
        });
        if let Some(u) = usage {
            v["usage"] = u;
        }
        sse::data(&v)
    }

    fn delta(&mut self, mut delta: Value, logprobs: Option<Value>) -> String {
        if !self.role_sent {
            self.role_sent = true;
            let mut with_role = json!({"role": "assistant"});
            if let (Some(w), Some(d)) = (with_role.as_object_mut(), delta.as_object_mut()) {
                w.append(d);
            }
            delta = with_role;
        }
        let mut choice = json!({"index": 0, "delta": delta, "finish_reason": null});
        if let Some(lp) = logprobs {
            choice["logprobs"] = lp;
        }
        self.frame(json!([choice]), None)
    }
}

impl Frames<ChatResponse> for ChunkFrames {
    fn chunk(&mut self, c: ChatResponse) -> String {
        self.model.clone_from(&c.model);
        let mut out = String::new();
        // Ollama's ToStreamChunks: one delta with content (kept when "") and the tool calls
        // and reasoning; thinking beside content or tool calls goes first, in a delta of its own
        // without content.
        let said = !c.message.content.is_empty() || !c.message.tool_calls.is_empty();
        let thought = !c.message.thinking.is_empty();
        if thought && said {
            out += &self.delta(json!({"reasoning": c.message.thinking}), None);
        }
        if said || thought {
            let mut delta = json!({"content": c.message.content});
            if thought && !said {
                delta["reasoning"] = json!(c.message.thinking);
            }
            if !c.message.tool_calls.is_empty() {
                self.called = true;
                let calls: Vec<Value> =
                    c.message.tool_calls.iter().map(common::tool_call).collect();
                delta["tool_calls"] = Value::Array(calls);
            }
            out += &self.delta(delta, common::logprobs(&c.logprobs));
        }
        if c.done {
            if !self.role_sent {
                out += &self.delta(json!({"content": ""}), None);
            }
            let reason = common::finish_reason(c.done_reason.as_deref(), self.called);
            out += &self.frame(
                json!([{"index": 0, "delta": {}, "finish_reason": reason}]),
                None,
            );
            if self.include_usage {
                let usage = common::usage(c.metrics.prompt_eval_count, c.metrics.eval_count);
                out += &self.frame(json!([]), Some(usage));
            }
        }
        out
    }

    fn error(&mut self, e: &ApiError) -> String {
        sse::data(&openai_body(e))
    }

    fn finish(&mut self) -> String {
        sse::DONE.to_owned()
    }
}

#[cfg(test)]
#[path = "chat_tests.rs"]
mod tests;
