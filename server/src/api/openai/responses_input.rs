//! The Responses API's `input` items and `tools` as native chat (`super::to_native`): `message`,
//! `function_call`, `function_call_output` (with image parts) and `reasoning` items become chat
//! messages, a replayed `web_search_call` is checked and skipped, and `namespace` tool groups
//! expand into `<namespace>.<member>` functions (Ollama's openai/responses.go).

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::super::error::ApiError;
use super::super::{chat, chat::InFunction, common};
use crate::api::types::{Message, Tool, ToolCall, ToolCallFunction};

/// The native tools `tools` declares: each `namespace` declaration (a named group whose
/// `tools` hold the real function definitions) is replaced by its members, named
/// `<namespace>.<member>` unless already so prefixed: native tools have flat names only, and
/// dropping the members would leave every namespaced function undeclared (Ollama's
/// convertTools). Every other item must be a function tool ([`common::flat_tool`]); a refused
/// one is named by the client's own path (`tools[2]`, `tools[0].tools[1]`), never by its
/// position after expansion. Nesting is bounded by the JSON parser's depth limit.
pub fn tools(tools: Option<&Value>) -> Result<Vec<Tool>, ApiError> {
    fn push(at: String, t: &Value, out: &mut Vec<Tool>) -> Result<(), ApiError> {
        if t.get("type").and_then(Value::as_str) != Some("namespace") {
            out.push(common::flat_tool(&at, t)?);
            return Ok(());
        }
        let ns = t.get("name").and_then(Value::as_str).unwrap_or_default();
        let members = t.get("tools").and_then(Value::as_array);
        for (j, m) in members.into_iter().flatten().enumerate() {
            let start = out.len();
            push(format!("{at}.tools[{j}]"), m, out)?;
            if ns.is_empty() {
                continue;
            }
            let prefix = format!("{ns}.");
            for f in &mut out[start..] {
                if !f.function.name.starts_with(&prefix) {
                    f.function.name.insert_str(0, &prefix);
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    for (i, t) in common::tool_items(tools)?.iter().enumerate() {
        push(format!("tools[{i}]"), t, &mut out)?;
    }
    Ok(out)
}

/// Appends the messages `input` describes.
pub(super) fn input_messages(
    input: Option<&Value>,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let items = match input {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) => {
            out.push(Message {
                role: "user".into(),
                content: s.clone(),
                ..Message::default()
            });
            return Ok(());
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid 'input': expected a string or an array of items",
            ))
        }
    };
    let mut pending_thinking = String::new();
    for (i, item) in items.iter().enumerate() {
        // An item without a type (absent, null or "") is a message when it has a role
        // (Ollama's decoding).
        let kind = match item.get("type").and_then(Value::as_str) {
            Some(t) if !t.is_empty() => t,
            _ if item
                .get("role")
                .and_then(Value::as_str)
                .is_some_and(|r| !r.is_empty()) =>
            {
                "message"
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "input[{i}]: input item missing required 'type' field"
                )))
            }
        };
        match kind {
            "message" => {
                let role = item
                    .get("role")
                    .and_then(Value::as_str)
                    .unwrap_or("user")
                    .to_lowercase();
                let role = if role == "developer" {
                    "system".to_owned()
                } else {
                    role
                };
                let (content, images) = message_content(item.get("content"))?;
                let mut m = Message {
                    role,
                    content,
                    images,
                    ..Message::default()
                };
                if m.role == "assistant" && !pending_thinking.is_empty() {
                    m.thinking = std::mem::take(&mut pending_thinking);
                }
                // An assistant message replayed between a function_call and its output stays
                // in the call's assistant turn, so the result follows the call it answers.
                let answers = items
                    .get(i + 1)
                    .filter(|n| {
                        n.get("type").and_then(Value::as_str) == Some("function_call_output")
                    })
                    .and_then(|n| n.get("call_id").and_then(Value::as_str));
                if let (Some(call), "assistant") = (answers, m.role.as_str()) {
                    if let Some(last) = out.last_mut().filter(|l| {
                        l.role == "assistant" && l.tool_calls.iter().any(|c| c.id == call)
                    }) {
                        if !last.content.is_empty() && !m.content.is_empty() {
                            last.content.push('\n');
                        }
                        last.content.push_str(&m.content);
                        last.images.extend(m.images);
                        if !m.thinking.is_empty() {
                            last.thinking = m.thinking;
                        }
                        continue;
                    }
                }
                out.push(m);
            }
            "function_call" => {
                let f: InFunction = serde_json::from_value(
                    json!({"name": item.get("name"), "arguments": item.get("arguments")}),
                )
                .map_err(|e| ApiError::bad_request(format!("invalid function_call item: {e}")))?;
                let arguments = match f.arguments {
                    Some(Value::String(s)) if !s.is_empty() => {
                        // Go's json.Unmarshal: a lone surrogate escape is U+FFFD.
                        let text = crate::prompt::parsers::govalue::go_surrogates(s.as_bytes());
                        serde_json::from_slice(&text).map_err(|e| {
                            ApiError::bad_request(format!(
                                "failed to parse function call arguments: {e}"
                            ))
                        })?
                    }
                    _ => Map::new(),
                };
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                // A call joins the assistant turn before it (its text, its other calls).
                if out.last().is_none_or(|m| m.role != "assistant") {
                    out.push(Message {
                        role: "assistant".into(),
                        ..Message::default()
                    });
                }
                let last = out
                    .last_mut()
                    .expect("an assistant message was just ensured");
                if !pending_thinking.is_empty() {
                    last.thinking = std::mem::take(&mut pending_thinking);
                }
                let index = last.tool_calls.len() as i64;
                last.tool_calls.push(ToolCall {
                    id: call_id,
                    function: ToolCallFunction {
                        index,
                        name: f.name,
                        arguments,
                    },
                });
            }
            "function_call_output" => {
                let call_id = item
                    .get("call_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                // Output parts keep their images on the tool message (a tool that returns a
                // screenshot), as Ollama's convertResponsesContent does.
                let (content, images) = match item.get("output") {
                    Some(Value::String(s)) => (s.clone(), Vec::new()),
                    Some(v @ Value::Array(_)) => message_content(Some(v))?,
                    Some(other) => (other.to_string(), Vec::new()),
                    None => (String::new(), Vec::new()),
                };
                // Only the call id, as Ollama (no tool name looked up).
                out.push(Message {
                    role: "tool".into(),
                    content,
                    images,
                    tool_call_id: call_id,
                    ..Message::default()
                });
            }
            "reasoning" => {
                // The reasoning replayed for the next assistant turn is its encrypted_content
                // (Ollama's thinking round trip); the summary is display text only.
                pending_thinking = item
                    .get("encrypted_content")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
            }
            "web_search_call" => {
                // A hosted web search replayed as history: metadata only, since the assistant
                // message after it carries what the model saw (Ollama decodes the item, then
                // skips it). Other hosted-tool calls stay unknown item types.
                serde_json::from_value::<WebSearchCall>(item.clone()).map_err(|e| {
                    ApiError::bad_request(format!("input[{i}]: invalid web_search_call: {e}"))
                })?;
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "input[{i}]: unknown input item type: {other:?}"
                )))
            }
        }
    }
    // Reasoning with no turn after it is an assistant turn of its own.
    if !pending_thinking.is_empty() {
        out.push(Message {
            role: "assistant".into(),
            thinking: pending_thinking,
            ..Message::default()
        });
    }
    Ok(())
}

/// The fields of a replayed `web_search_call` item, decoded only to refuse mistyped ones as
/// Ollama's `ResponsesWebSearchCall` does.
#[derive(Deserialize)]
#[allow(dead_code)]
struct WebSearchCall {
    id: Option<String>,
    status: Option<String>,
    action: Option<WebSearchAction>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct WebSearchAction {
    #[serde(rename = "type")]
    kind: Option<String>,
    query: Option<String>,
}

/// Responses content: a string or parts (`input_text`/`output_text`, `input_image` data URIs).
fn message_content(v: Option<&Value>) -> Result<(String, Vec<String>), ApiError> {
    let Some(Value::Array(parts)) = v else {
        return chat::content(v);
    };
    let (mut texts, mut images) = (Vec::new(), Vec::new());
    for p in parts {
        match p.get("type").and_then(Value::as_str) {
            Some("input_text") | Some("output_text") | Some("text") => texts.push(
                p.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Some("input_image") => {
                // An image by file id only is skipped, as in Ollama.
                match p.get("image_url").and_then(Value::as_str) {
                    Some(url) if !url.is_empty() => images.push(chat::data_uri_image(url)?),
                    _ => {}
                }
            }
            Some("input_file") => {
                return Err(ApiError::bad_request(
                    "file inputs are not currently supported",
                ))
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "unknown content type: {}",
                    other.unwrap_or_default()
                )))
            }
        }
    }
    // Parts are concatenated as they are (Ollama's convertResponsesContent).
    Ok((texts.concat(), images))
}
