//! Anthropic Messages request → native `ChatRequest`: `system` (string or text blocks) becomes
//! the first system message; content blocks map to native fields (text → content, base64
//! image → images, assistant `thinking` → thinking, `tool_use` → tool calls with object
//! arguments, `tool_result` → a `tool` message named after its call); `max_tokens` →
//! `num_predict`, `stop_sequences` → `stop`, `temperature`/`top_p`/`top_k` as given.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::api::openai::error::ApiError;
use crate::api::types::{ChatRequest, Message, Tool, ToolCall, ToolCallFunction};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MessagesRequest {
    pub model: String,
    pub max_tokens: Option<i64>,
    pub messages: Option<Vec<InMessage>>,
    pub system: Option<Value>,
    pub stream: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<i64>,
    pub stop_sequences: Option<Vec<String>>,
    pub tools: Option<Value>,
    pub thinking: Option<Value>,
    /// `{effort, format}`: effort is a thinking level, format a JSON schema for the output.
    pub output_config: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct InMessage {
    pub role: String,
    pub content: Value,
}

fn bad(msg: impl Into<String>) -> ApiError {
    ApiError::bad_request(msg)
}

/// `thinking: {type: "enabled"|"disabled"}` → native `think` (true/false). Without it, an
/// `output_config.effort` of `low`, `medium`, `high` or `max` (`xhigh` reads as `high`) asks for
/// that thinking level. Other values are ignored, as Ollama ignores them.
pub fn thinking(v: Option<&Value>, output_config: Option<&Value>) -> Option<Value> {
    match v.and_then(|t| t.get("type")).and_then(Value::as_str) {
        Some("enabled") => return Some(json!(true)),
        Some("disabled") => return Some(json!(false)),
        _ => {}
    }
    let effort = output_config
        .and_then(|o| o.get("effort"))
        .and_then(Value::as_str)?
        .trim()
        .to_lowercase();
    match effort.as_str() {
        "xhigh" => Some(json!("high")),
        "low" | "medium" | "high" | "max" => Some(json!(effort)),
        _ => None,
    }
}

/// `think` is what survives the model's capability check (see `super`).
/// Checked in Ollama's order and words (its Anthropic middleware): model, max_tokens, messages.
pub fn to_native(req: MessagesRequest, think: Option<Value>) -> Result<ChatRequest, ApiError> {
    if req.model.is_empty() {
        return Err(bad("model is required"));
    }
    let max_tokens = match req.max_tokens {
        Some(n) if n > 0 => n,
        _ => return Err(bad("max_tokens is required and must be positive")),
    };
    let input = req.messages.unwrap_or_default();
    if input.is_empty() {
        return Err(bad("messages is required"));
    }
    let mut messages = Vec::new();
    let system = system_text(req.system.as_ref())?;
    if !system.is_empty() {
        messages.push(Message {
            role: "system".into(),
            content: system,
            ..Message::default()
        });
    }
    for m in input {
        convert(m, &mut messages)?;
    }
    let mut options = Map::new();
    options.insert("num_predict".into(), json!(max_tokens));
    if let Some(t) = req.temperature {
        options.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        options.insert("top_p".into(), json!(p));
    }
    if let Some(k) = req.top_k {
        options.insert("top_k".into(), json!(k));
    }
    if let Some(s) = req.stop_sequences.filter(|s| !s.is_empty()) {
        options.insert("stop".into(), json!(s));
    }
    Ok(ChatRequest {
        model: req.model,
        messages,
        stream: Some(req.stream.unwrap_or(false)),
        format: output_format(req.output_config.as_ref())?,
        tools: tools(req.tools.as_ref())?,
        options: Some(options),
        think,
        ..ChatRequest::default()
    })
}

/// `output_config.format: {type: "json_schema", schema}` → native `format`.
fn output_format(v: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(f) = v.and_then(|o| o.get("format")).filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match (f.get("type").and_then(Value::as_str), f.get("schema")) {
        (Some("json_schema"), Some(s)) if s.is_object() => Ok(Some(s.clone())),
        _ => Err(bad(
            "output_config.format: expected {\"type\": \"json_schema\", \"schema\": {...}}",
        )),
    }
}

fn system_text(v: Option<&Value>) -> Result<String, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => Ok(blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<String>()),
        Some(_) => Err(bad("system: expected a string or an array of text blocks")),
    }
}

/// A tool result's content: a string, or blocks whose texts are concatenated and whose images
/// are kept.
fn tool_result(v: Option<&Value>) -> Result<(String, Vec<String>), ApiError> {
    match v {
        Some(Value::String(s)) => Ok((s.clone(), Vec::new())),
        Some(Value::Array(blocks)) => {
            let (mut text, mut images) = (String::new(), Vec::new());
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        text.push_str(b.get("text").and_then(Value::as_str).unwrap_or_default())
                    }
                    Some("image") => images.push(image(b)?),
                    _ => {}
                }
            }
            Ok((text, images))
        }
        _ => Ok((String::new(), Vec::new())),
    }
}

/// An image block's base64 payload; only inline base64 sources are accepted (the server never
/// fetches URLs on a client's behalf).
fn image(block: &Value) -> Result<String, ApiError> {
    use base64::Engine as _;
    let Some(source) = block.get("source").filter(|s| s.is_object()) else {
        return Err(bad("invalid image source"));
    };
    let kind = source
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind != "base64" {
        return Err(bad(format!(
            "invalid image source type: {kind}. Only base64 images are supported."
        )));
    }
    let data = source
        .get("data")
        .and_then(Value::as_str)
        .unwrap_or_default();
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .map_err(|e| bad(format!("invalid base64 image data: {e}")))?;
    Ok(data.to_owned())
}

/// One Anthropic message as native messages, as Ollama's `convertMessage`: the text, images,
/// tool calls and thinking (the last thinking block) as one message of the role — none when
/// all are empty — and each `tool_result` as a `tool` message with its call id, ahead of a
/// user's message and after anyone else's.
fn convert(m: InMessage, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let role = m.role.to_lowercase();
    let mut msg = Message {
        role: role.clone(),
        ..Message::default()
    };
    let blocks = match m.content {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b,
        _ => {
            return Err(bad(
                "messages: content must be a string or an array of blocks",
            ))
        }
    };
    let mut results = Vec::new();
    for b in &blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => msg
                .content
                .push_str(b.get("text").and_then(Value::as_str).unwrap_or_default()),
            Some("image") => msg.images.push(image(b)?),
            Some("thinking") => {
                if let Some(t) = b.get("thinking").and_then(Value::as_str) {
                    msg.thinking = t.to_owned();
                }
            }
            Some("tool_use") => {
                let id = b
                    .get("id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let name = b
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                if id.is_empty() {
                    return Err(bad("tool_use block missing required 'id' field"));
                }
                if name.is_empty() {
                    return Err(bad("tool_use block missing required 'name' field"));
                }
                let arguments = match b.get("input") {
                    Some(Value::Object(o)) => o.clone(),
                    None | Some(Value::Null) => Map::new(),
                    Some(_) => return Err(bad("tool_use.input: must be an object")),
                };
                let index = msg.tool_calls.len() as i64;
                msg.tool_calls.push(ToolCall {
                    id,
                    function: ToolCallFunction {
                        index,
                        name,
                        arguments,
                    },
                });
            }
            Some("tool_result") => {
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                let (content, images) = tool_result(b.get("content"))?;
                results.push(Message {
                    role: "tool".into(),
                    content,
                    images,
                    tool_call_id: id,
                    ..Message::default()
                });
            }
            // Unknown block kinds are skipped, as Ollama skips them.
            _ => {}
        }
    }
    let empty = msg.content.is_empty()
        && msg.images.is_empty()
        && msg.tool_calls.is_empty()
        && msg.thinking.is_empty();
    if role == "user" {
        out.append(&mut results);
    }
    if !empty {
        out.push(msg);
    }
    out.append(&mut results);
    Ok(())
}

/// `tools: [{name, description, input_schema}]` → native function tools.
pub fn tools(v: Option<&Value>) -> Result<Vec<Tool>, ApiError> {
    let items = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(a)) => a,
        Some(_) => return Err(bad("tools: expected an array")),
    };
    items
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let name = match t.get("name") {
                Some(Value::String(n)) if !n.is_empty() => n.clone(),
                _ => {
                    return Err(bad(format!(
                        "tools.{i}.name: a non-empty string is required"
                    )))
                }
            };
            let parameters = match t.get("input_schema") {
                Some(Value::Object(o)) => Value::Object(o.clone()),
                None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                Some(_) => {
                    return Err(bad(format!(
                        "tools.{i}.input_schema: must be a JSON schema object"
                    )))
                }
            };
            let description = match t.get("description") {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => s.clone(),
                Some(_) => return Err(bad(format!("tools.{i}.description: must be a string"))),
            };
            Ok(Tool {
                kind: "function".into(),
                items: None,
                function: crate::api::types::ToolFunction {
                    name,
                    description,
                    parameters,
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(v: Value) -> MessagesRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn request_becomes_native() {
        let n = to_native(
            req(json!({
                "model": "smollm2", "max_tokens": 32, "system": [{"type": "text", "text": "be brief"}],
                "stop_sequences": ["\n\n"], "temperature": 0.3, "top_k": 5, "metadata": {"user_id": "u"},
                "tools": [{"name": "weather", "description": "d", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}]},
                    {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "sunny"}]}]}
                ]
            })),
            Some(json!(true)),
        )
        .unwrap();
        assert_eq!(n.stream, Some(false));
        assert_eq!(n.think, Some(json!(true)));
        assert_eq!(
            Value::Object(n.options.unwrap()),
            json!({"num_predict": 32, "temperature": 0.3, "top_k": 5, "stop": ["\n\n"]})
        );
        assert_eq!(n.tools[0].function.name, "weather");
        let wire = crate::api::types::wire(&n.messages);
        assert_eq!(
            wire,
            vec![
                json!({"role": "system", "content": "be brief"}),
                json!({"role": "user", "content": "hi", "images": ["aGk="]}),
                json!({"role": "assistant", "content": "", "thinking": "hm",
                       "tool_calls": [{"id": "toolu_1", "function": {"index": 0, "name": "weather", "arguments": {"city": "Paris"}}}]}),
                json!({"role": "tool", "content": "sunny", "tool_call_id": "toolu_1"}),
            ]
        );
    }

    /// Ollama's `convertMessage`: an empty turn is no message, the last thinking block is the
    /// thinking, a user's tool results come before its text and anyone else's after.
    #[test]
    fn blocks_become_messages_as_ollama_converts_them() {
        let n = to_native(
            req(json!({"model": "m", "max_tokens": 8, "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": ""},
                {"role": "assistant", "content": []},
                {"role": "assistant", "content": [{"type": "thinking", "thinking": "AAA"},
                    {"type": "thinking", "thinking": "BBB"}, {"type": "text", "text": "ok"}]},
                {"role": "user", "content": [{"type": "text", "text": "and?"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": "r"}]},
            ]})),
            None,
        )
        .unwrap();
        let wire = crate::api::types::wire(&n.messages);
        assert_eq!(
            wire,
            vec![
                json!({"role": "user", "content": "hi"}),
                json!({"role": "assistant", "content": "ok", "thinking": "BBB"}),
                json!({"role": "tool", "content": "r", "tool_call_id": "t1"}),
                json!({"role": "user", "content": "and?"}),
            ]
        );
    }

    #[test]
    fn bad_requests() {
        let err = |v: Value| to_native(req(v), None).unwrap_err();
        assert_eq!(
            err(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).message,
            "max_tokens is required and must be positive"
        );
        assert_eq!(
            err(json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]})).message,
            "max_tokens is required and must be positive"
        );
        assert_eq!(
            err(json!({"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})).message,
            "model is required"
        );
        assert_eq!(
            err(json!({"model": "m", "max_tokens": 5, "messages": []})).message,
            "messages is required"
        );
        assert_eq!(
            err(json!({"model": "m", "max_tokens": 5, "messages": []})).status,
            400
        );
        let e = err(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]}),
        );
        assert_eq!(
            e.message,
            "invalid image source type: url. Only base64 images are supported."
        );
        let e = err(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": "not base64!"}}]}]}),
        );
        assert!(
            e.message.starts_with("invalid base64 image data"),
            "{}",
            e.message
        );
        assert_eq!(err(json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"description": "no name"}]})).status, 400);
        let e = err(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "assistant", "content": [
            {"type": "tool_use", "name": "f", "input": {}}]}]}),
        );
        assert_eq!(e.message, "tool_use block missing required 'id' field");
        // Unknown blocks are skipped; text blocks concatenate as they are.
        let n = to_native(req(json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "document", "source": {}}, {"type": "text", "text": "b"}]}]})), None).unwrap();
        assert_eq!(n.messages[0].content, "ab");
        let on = json!({"type": "enabled", "budget_tokens": 1024});
        let off = json!({"type": "disabled"});
        let effort = |e: &str| json!({ "effort": e });
        assert_eq!(thinking(Some(&on), None), Some(json!(true)));
        assert_eq!(
            thinking(Some(&off), Some(&effort("high"))),
            Some(json!(false))
        );
        assert_eq!(
            thinking(Some(&on), Some(&effort("high"))),
            Some(json!(true)),
            "thinking wins over effort"
        );
        assert_eq!(thinking(None, Some(&effort(" High "))), Some(json!("high")));
        assert_eq!(thinking(None, Some(&effort("xhigh"))), Some(json!("high")));
        assert_eq!(thinking(None, Some(&effort("max"))), Some(json!("max")));
        assert_eq!(thinking(None, Some(&effort("extreme"))), None);
        assert_eq!(thinking(Some(&json!({"type": "adaptive"})), None), None);
        assert_eq!(thinking(None, None), None);
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        let n = to_native(req(json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "output_config": {"format": {"type": "json_schema", "schema": schema}}})), None).unwrap();
        assert_eq!(n.format, Some(schema));
        assert_eq!(err(json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "output_config": {"format": {"type": "json_schema"}}})).status, 400);
    }
}
