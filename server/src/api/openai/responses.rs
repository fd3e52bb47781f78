//! `POST /v1/responses` (OpenAI Responses API), stateless like Ollama's: `input` (a string or
//! items — `message`, `function_call`, `function_call_output`, `reasoning`; a replayed
//! `web_search_call` is skipped) and `instructions` become native chat messages;
//! `max_output_tokens`, sampling, function `tools` (`namespace` groups expanded into
//! `<namespace>.<member>` functions) and `reasoning.effort` map as in chat completions;
//! `text.format` constrains only as `json_schema` with a schema (`json_object` is echoed but
//! ignored, as in Ollama); `truncation` and `background` are only echoed. The reply is a
//! `response` object whose `output` holds `reasoning` (the thinking also as
//! `encrypted_content`, which a replayed item gives back),
//! `message` and `function_call` items; streams are
//! named SSE events (`response.created`, `response.in_progress`, `response.output_item.added`,
//! `response.reasoning_summary_*`, `response.content_part.*`, `response.output_text.*`,
//! `response.function_call_arguments.*`, `response.output_item.done`, `response.completed` or
//! `response.failed`), each with `type` and an increasing `sequence_number`. Bodies may be
//! `Content-Encoding: zstd` (as Ollama accepts), decoded up to the JSON body limit.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};

use super::chat;
use super::common::{self, Sampling};
use super::error::{openai_response, ApiError};
use super::native::{self, Reply};
use super::sse;
use crate::api::types::{ChatRequest, ChatResponse, Message, ToolCall};
use crate::api::AppState;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ResponsesRequest {
    pub model: String,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub tools: Option<Value>,
    pub reasoning: Option<Value>,
    pub text: Option<Value>,
    pub stream: Option<bool>,
    pub previous_response_id: Option<String>,
    /// Echoed back (default `"disabled"`), as Ollama; nothing is truncated either way.
    pub truncation: Option<String>,
    /// Echoed back (absent or `null` is `false`); the response is produced in the foreground
    /// regardless (Ollama).
    pub background: Option<bool>,
}

/// Request fields a `response` object echoes back.
#[derive(Debug, Clone, Default)]
pub struct Echo {
    pub model: String,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<i64>,
    pub temperature: f64,
    pub top_p: f64,
    pub tools: Value,
    pub reasoning: Value,
    pub text_format: Value,
    /// `None` echoes Ollama's default, `"disabled"`.
    pub truncation: Option<String>,
    pub background: bool,
}

pub async fn responses(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let limit = state.max_json_body;
    let body = body.map(|b| common::content_decode(&headers, b, limit));
    let body = match body {
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => return openai_response(&e),
        Err(r) => Err(r),
    };
    match run(state, body).await {
        Ok(r) => r,
        Err(e) => openai_response(&e),
    }
}

async fn run(state: AppState, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: ResponsesRequest = common::decode(body)?;
    let streaming = req.stream.unwrap_or(false);
    let (native_req, echo) = to_native(req)?;
    let reply = native::chat(&state, native_req).await?;
    let id = common::random_id("resp_", 24);
    let created = common::unix_now();
    if streaming {
        return Ok(sse::response(
            reply.into_stream(),
            EventFrames::new(id, created, echo),
        ));
    }
    let r = match reply {
        Reply::One(r) => r,
        Reply::Stream(s) => chat::fold(s).await?,
    };
    let output = output_items(&r);
    let usage = usage(&r);
    Ok(Json(response_object(
        &id,
        created,
        &echo,
        &r.model,
        COMPLETED,
        output,
        Some(usage),
    ))
    .into_response())
}

pub fn to_native(req: ResponsesRequest) -> Result<(ChatRequest, Echo), ApiError> {
    if req
        .previous_response_id
        .as_deref()
        .is_some_and(|p| !p.is_empty())
    {
        return Err(ApiError::bad_request(
            "previous_response_id is not supported: send the whole conversation in 'input'",
        ));
    }
    let mut messages = Vec::new();
    if let Some(i) = req.instructions.as_ref().filter(|i| !i.is_empty()) {
        messages.push(Message {
            role: "system".into(),
            content: i.clone(),
            ..Message::default()
        });
    }
    input_messages(req.input.as_ref(), &mut messages)?;
    if messages.iter().all(|m| m.role == "system") {
        return Err(ApiError::bad_request("input is required"));
    }
    let effort = req
        .reasoning
        .as_ref()
        .and_then(|r| r.get("effort"))
        .and_then(Value::as_str);
    let text_format = req
        .text
        .as_ref()
        .and_then(|t| t.get("format"))
        .cloned()
        .unwrap_or(json!({"type": "text"}));
    // Only `json_schema` with a schema constrains the output, as in Ollama's
    // FromResponsesRequest: `json_object` (and a schema-less `json_schema`) is echoed but
    // ignored, so it leaves the output free rather than becoming native `format: "json"`. A
    // schema that is neither an object nor "json" fails the native format check.
    let format = match text_format.get("type").and_then(Value::as_str) {
        Some("json_schema") => text_format.get("schema").filter(|s| !s.is_null()).cloned(),
        _ => None,
    };
    let sampling = Sampling {
        temperature: req.temperature,
        top_p: req.top_p,
        ..Sampling::default()
    };
    let options = common::options(&sampling, req.max_output_tokens, common::Dialect::Responses)?;
    let echo = Echo {
        model: req.model.clone(),
        instructions: req.instructions.clone(),
        max_output_tokens: req.max_output_tokens,
        temperature: options["temperature"].as_f64().unwrap_or(1.0),
        // Echoed as 1.0 when absent though the model's own applies (Ollama's derefFloat64).
        top_p: options.get("top_p").and_then(Value::as_f64).unwrap_or(1.0),
        tools: req
            .tools
            .clone()
            .filter(|t| !t.is_null())
            .unwrap_or(json!([])),
        // null unless the request gave an effort or a summary (Ollama).
        reasoning: {
            let summary = req
                .reasoning
                .as_ref()
                .and_then(|r| r.get("summary"))
                .cloned();
            if effort.is_none() && summary.as_ref().is_none_or(Value::is_null) {
                Value::Null
            } else {
                json!({"effort": effort, "summary": summary})
            }
        },
        text_format,
        truncation: req.truncation.clone(),
        background: req.background.unwrap_or(false),
    };
    let native_req = ChatRequest {
        model: req.model,
        messages,
        stream: Some(req.stream.unwrap_or(false)),
        format,
        tools: input::tools(req.tools.as_ref())?,
        options: Some(options),
        think: common::think(effort)?,
        ..ChatRequest::default()
    };
    Ok((native_req, echo))
}

/// A finished response's status, a truncated one's too (Ollama's ToResponse and stream
/// converter never report "incomplete"; `incomplete_details` stays null).
const COMPLETED: &str = "completed";

fn usage(r: &ChatResponse) -> Value {
    let (i, o) = (r.metrics.prompt_eval_count, r.metrics.eval_count);
    json!({"input_tokens": i, "input_tokens_details": {"cached_tokens": r.metrics.prompt_cached},
           "output_tokens": o, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": i + o})
}

/// A finished reasoning item. `encrypted_content` carries the thinking itself (plain text, as
/// Ollama sends it): clients replay reasoning items by that field, and [`input_messages`] reads
/// it back into the next assistant turn's `thinking`.
fn reasoning_item(id: &str, text: &str) -> Value {
    json!({"id": id, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}],
           "encrypted_content": text})
}

fn message_item(id: &str, status: &str, text: Option<&str>) -> Value {
    let content = match text {
        Some(t) => json!([{"type": "output_text", "text": t, "annotations": [], "logprobs": []}]),
        None => json!([]),
    };
    json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": content})
}

fn call_item(id: &str, status: &str, c: &ToolCall, arguments: &str) -> Value {
    let call_id = if c.id.is_empty() {
        common::random_id("call_", 8)
    } else {
        c.id.clone()
    };
    json!({"id": id, "type": "function_call", "status": status, "call_id": call_id,
           "name": c.function.name, "arguments": arguments})
}

/// The `output` items of a finished reply.
pub fn output_items(r: &ChatResponse) -> Vec<Value> {
    let mut out = Vec::new();
    if !r.message.thinking.is_empty() {
        out.push(reasoning_item(
            &common::random_id("rs_", 24),
            &r.message.thinking,
        ));
    }
    if !r.message.content.is_empty() || r.message.tool_calls.is_empty() {
        out.push(message_item(
            &common::random_id("msg_", 24),
            "completed",
            Some(&r.message.content),
        ));
    }
    for c in &r.message.tool_calls {
        let args = crate::api::gomarshal::arguments_string(&c.function.arguments);
        out.push(call_item(
            &common::random_id("fc_", 24),
            "completed",
            c,
            &args,
        ));
    }
    out
}

pub fn response_object(
    id: &str,
    created: i64,
    echo: &Echo,
    model: &str,
    status: &str,
    output: Vec<Value>,
    usage: Option<Value>,
) -> Value {
    // Set once the response is over (Ollama's middleware sets it on the final object).
    let completed_at = (status != "in_progress").then(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(created, |d| d.as_secs() as i64)
    });
    json!({
        "id": id,
        "object": "response",
        "created_at": created,
        "completed_at": completed_at,
        "status": status,
        "background": echo.background,
        "error": null,
        "incomplete_details": null,
        "instructions": echo.instructions,
        "max_output_tokens": echo.max_output_tokens,
        "model": if model.is_empty() { echo.model.as_str() } else { model },
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "reasoning": echo.reasoning,
        "store": false,
        "temperature": echo.temperature,
        "text": {"format": echo.text_format},
        "tool_choice": "auto",
        "tools": echo.tools,
        "top_p": echo.top_p,
        "truncation": echo.truncation.as_deref().unwrap_or("disabled"),
        "usage": usage,
        "metadata": {},
        // Ollama's defaults for what it does not offer.
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "top_logprobs": 0,
        "max_tool_calls": null,
        "service_tier": "default",
        "safety_identifier": null,
        "prompt_cache_key": null,
    })
}

#[path = "responses_input.rs"]
mod input;
use input::input_messages;

#[path = "responses_stream.rs"]
mod stream;
pub use stream::EventFrames;

#[cfg(test)]
#[path = "responses_tests.rs"]
mod tests;
