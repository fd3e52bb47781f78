//! Wire types of Ollama's native inference endpoints (`/api/generate`, `/api/chat`,
//! `/api/embed`, `/api/embeddings`), field for field with `api/types.go`. Requests keep the
//! loosely typed fields (`format`, `think`, `keep_alive`, `options`, `input`) as raw JSON so
//! `request.rs` can reject them with Ollama's exact messages; responses omit what Go omits
//! (`omitempty`), so metrics appear only when non-zero.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `POST /api/generate`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct GenerateRequest {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    #[serde(deserialize_with = "null_default")]
    pub prompt: String,
    #[serde(deserialize_with = "null_default")]
    pub suffix: String,
    #[serde(deserialize_with = "null_default")]
    pub system: String,
    #[serde(deserialize_with = "null_default")]
    pub template: String,
    /// Deprecated: token ids of a previous exchange, detokenized and prepended.
    pub context: Option<Vec<i64>>,
    pub stream: Option<bool>,
    #[serde(deserialize_with = "null_default")]
    pub raw: bool,
    pub format: Option<Value>,
    pub keep_alive: Option<Value>,
    /// Base64 images (no `data:` prefix).
    #[serde(deserialize_with = "null_default")]
    pub images: Vec<String>,
    pub options: Option<Map<String, Value>>,
    pub think: Option<Value>,
    pub truncate: Option<bool>,
    pub shift: Option<bool>,
    #[serde(rename = "_debug_render_only", deserialize_with = "null_default")]
    pub debug_render_only: bool,
    #[serde(deserialize_with = "null_default")]
    pub logprobs: bool,
    #[serde(deserialize_with = "null_default")]
    pub top_logprobs: i64,
}

/// `POST /api/chat`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChatRequest {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    #[serde(deserialize_with = "null_default")]
    pub messages: Vec<Message>,
    pub stream: Option<bool>,
    pub format: Option<Value>,
    pub keep_alive: Option<Value>,
    #[serde(deserialize_with = "null_default")]
    pub tools: Vec<Tool>,
    pub options: Option<Map<String, Value>>,
    pub think: Option<Value>,
    pub truncate: Option<bool>,
    pub shift: Option<bool>,
    #[serde(rename = "_debug_render_only", deserialize_with = "null_default")]
    pub debug_render_only: bool,
    #[serde(deserialize_with = "null_default")]
    pub logprobs: bool,
    #[serde(deserialize_with = "null_default")]
    pub top_logprobs: i64,
}

impl GenerateRequest {
    /// `stream` defaults to true.
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(true)
    }
}

impl ChatRequest {
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(true)
    }
}

/// A chat message. `role` is lower-cased on input, as Ollama does.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Message {
    #[serde(default, deserialize_with = "lowercase")]
    pub role: String,
    #[serde(default, deserialize_with = "null_default")]
    pub content: String,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub thinking: String,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub images: Vec<String>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_calls: Vec<ToolCall>,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tool_name: String,
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tool_call_id: String,
}

/// Go decodes JSON `null` into a field's zero value; serde would reject it.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn lowercase<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    Ok(Option::<String>::deserialize(d)?
        .unwrap_or_default()
        .to_lowercase())
}

impl Message {
    pub fn assistant(content: impl Into<String>) -> Message {
        Message {
            role: "assistant".into(),
            content: content.into(),
            ..Message::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    pub function: ToolCallFunction,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallFunction {
    /// Always serialized, even when 0.
    #[serde(default)]
    pub index: i64,
    pub name: String,
    /// An ordered JSON object (never a string on the native API), its floats printed as Go
    /// prints them (`gomarshal`).
    #[serde(default, serialize_with = "crate::api::gomarshal::arguments")]
    pub arguments: Map<String, Value>,
}

/// A tool definition. The schema parts stay as JSON: they are rendered into prompts and passed
/// to grammars verbatim, never interpreted field by field here.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tool {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Value>,
    #[serde(default)]
    pub function: ToolFunction,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolFunction {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub parameters: Value,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bytes: Vec<u8>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Logprob {
    #[serde(flatten)]
    pub token: TokenLogprob,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_logprobs: Vec<TokenLogprob>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Timing and token counts; durations are integer nanoseconds. Zero fields are omitted, so
/// only the final chunk carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metrics {
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_duration: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub load_duration: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prompt_eval_count: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prompt_eval_duration: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub eval_count: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub eval_duration: u64,
    /// Of `prompt_eval_count`, the tokens reused from the runner's cache. Not on Ollama's wire;
    /// `/v1/responses` reports it as `input_tokens_details.cached_tokens`.
    #[serde(skip)]
    pub prompt_cached: u64,
    /// On a stream's first content chunk: the prompt's token count, known before the final
    /// metrics (the Anthropic stream's `message_start` reports it). Not on Ollama's wire.
    #[serde(skip)]
    pub prompt_announced: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DebugInfo {
    pub rendered_template: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub image_count: u64,
}

/// One `/api/generate` chunk (or the whole non-streamed reply). Field order is Go's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GenerateResponse {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    /// RFC 3339 with nanoseconds, UTC (`created_at_now`).
    pub created_at: String,
    pub response: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub thinking: String,
    pub done: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<i64>,
    #[serde(flatten)]
    pub metrics: Metrics,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(
        rename = "_debug_info",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub debug_info: Option<DebugInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<Logprob>,
}

/// One `/api/chat` chunk (or the whole non-streamed reply). Field order is Go's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    pub created_at: String,
    pub message: Message,
    pub done: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub done_reason: Option<String>,
    #[serde(
        rename = "_debug_info",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub debug_info: Option<DebugInfo>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logprobs: Vec<Logprob>,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// `POST /api/embed`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EmbedRequest {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    /// A string or an array of strings (see `embed::inputs`).
    pub input: Option<Value>,
    pub keep_alive: Option<Value>,
    pub truncate: Option<bool>,
    #[serde(deserialize_with = "null_default")]
    pub dimensions: i64,
    pub options: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmbedResponse {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    pub embeddings: Vec<Vec<f32>>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub total_duration: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub load_duration: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prompt_eval_count: u64,
}

/// `POST /api/embeddings` (legacy).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct EmbeddingRequest {
    #[serde(deserialize_with = "null_default")]
    pub model: String,
    #[serde(deserialize_with = "null_default")]
    pub prompt: String,
    pub keep_alive: Option<Value>,
    pub options: Option<Map<String, Value>>,
}

/// The legacy reply: one raw (not normalized) vector, as float64.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EmbeddingResponse {
    pub embedding: Vec<f64>,
}

/// `created_at` for a chunk produced now.
pub fn created_at_now() -> String {
    super::models::rfc3339_nano(std::time::SystemTime::now())
}

/// Test helper: messages as the JSON they go on the wire as (the translation layers' tests
/// compare these).
#[cfg(test)]
pub(crate) fn wire(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn final_chunk_carries_metrics_and_others_do_not() {
        let mut chunk = GenerateResponse {
            model: "m:latest".into(),
            created_at: "2024-01-01T00:00:00.5Z".into(),
            response: "Hi".into(),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(&chunk).unwrap(),
            json!({"model": "m:latest", "created_at": "2024-01-01T00:00:00.5Z", "response": "Hi", "done": false})
        );
        chunk.response.clear();
        chunk.done = true;
        chunk.done_reason = Some("stop".into());
        chunk.context = vec![1, 2];
        chunk.metrics = Metrics {
            total_duration: 1_500_000_000,
            load_duration: 0,
            prompt_eval_count: 3,
            prompt_eval_duration: 40_000,
            eval_count: 2,
            eval_duration: 90_000,
            // Internal: never on the wire.
            prompt_cached: 2,
            prompt_announced: 3,
        };
        assert_eq!(
            serde_json::to_string(&chunk).unwrap(),
            r#"{"model":"m:latest","created_at":"2024-01-01T00:00:00.5Z","response":"","done":true,"done_reason":"stop","context":[1,2],"total_duration":1500000000,"prompt_eval_count":3,"prompt_eval_duration":40000,"eval_count":2,"eval_duration":90000}"#
        );
    }

    #[test]
    fn chat_chunk_shape() {
        let mut msg = Message::assistant("");
        msg.tool_calls = vec![ToolCall {
            id: String::new(),
            function: ToolCallFunction {
                index: 0,
                name: "get_weather".into(),
                arguments: serde_json::from_value(json!({"city": "Paris", "unit": "c"})).unwrap(),
            },
        }];
        let chunk = ChatResponse {
            model: "m".into(),
            created_at: "t".into(),
            message: msg,
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_string(&chunk).unwrap(),
            r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"","tool_calls":[{"function":{"index":0,"name":"get_weather","arguments":{"city":"Paris","unit":"c"}}}]},"done":false}"#
        );
    }

    #[test]
    fn requests_decode_like_go() {
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [{"role": "USER", "content": "hi", "images": ["aGk="]}],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
            "think": "high",
            "unknown_field": 1
        }))
        .unwrap();
        assert_eq!(req.messages[0].role, "user");
        // Go decodes null into zero values.
        let nulls: ChatRequest = serde_json::from_value(json!({
            "model": "m", "messages": [{"role": "assistant", "content": null, "tool_calls": null}],
            "tools": null, "logprobs": null
        }))
        .unwrap();
        assert_eq!(nulls.messages[0].content, "");
        assert!(nulls.tools.is_empty());
        assert!(req.streams());
        assert_eq!(req.think, Some(json!("high")));
        assert_eq!(req.tools[0].function.name, "f");
        let req: GenerateRequest =
            serde_json::from_value(json!({"model": "m", "stream": false, "context": [1, 2]}))
                .unwrap();
        assert!(!req.streams());
        assert_eq!(req.context, Some(vec![1, 2]));
        let logprob = Logprob {
            token: TokenLogprob {
                token: "a".into(),
                logprob: -0.5,
                bytes: vec![97],
            },
            top_logprobs: vec![],
        };
        assert_eq!(
            serde_json::to_value(&logprob).unwrap(),
            json!({"token": "a", "logprob": -0.5, "bytes": [97]})
        );
    }
}
