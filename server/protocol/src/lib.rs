//! The contract between `herd serve` and its runner processes.
//!
//! Transport: HTTP/1.1 over a Unix socket whose path the server passes as `--socket`. The server
//! creates a private 0700 directory per server process; the runner binds the socket 0600 inside
//! it. Endpoints and bodies:
//!
//! | method + path      | request               | response                                          |
//! |--------------------|-----------------------|---------------------------------------------------|
//! | `GET /health`      | –                     | [`Health`]                                        |
//! | `GET /info`        | –                     | [`Info`]                                          |
//! | `POST /completion` | [`CompletionRequest`] | NDJSON of [`CompletionChunk`], ending in `Done` or `Error` |
//! | `POST /embed`      | [`EmbedRequest`]      | [`EmbedResponse`]                                 |
//! | `POST /tokenize`   | [`TokenizeRequest`]   | [`TokenizeResponse`]                              |
//! | `POST /detokenize` | [`DetokenizeRequest`] | [`DetokenizeResponse`]                            |
//!
//! Any non-2xx response carries an [`ErrorBody`]. Closing the connection cancels the request; the
//! runner notices between ubatches and frees the slot. Error classification travels as
//! [`ErrorKind`]; the server never infers it from log text.
//!
//! This crate holds no HTTP framework: both sides bring their own.

mod args;
mod load;

pub use args::LoadArgs;
pub use load::{FlashAttention, KvCacheType, LoadOptions};

use serde::{Deserialize, Serialize};

/// Content type of the `/completion` stream.
pub const NDJSON: &str = "application/x-ndjson";

/// Typed failure classes. The status code each maps to on the socket is [`ErrorKind::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ErrorKind {
    #[error("out of memory")]
    OutOfMemory,
    #[error("model load failed")]
    ModelLoad,
    #[error("context overflow")]
    ContextOverflow,
    #[error("bad request")]
    BadRequest,
    #[error("cancelled")]
    Cancelled,
    #[error("internal error")]
    Internal,
}

impl ErrorKind {
    /// HTTP status the runner uses on the socket for this kind.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest | ErrorKind::ContextOverflow => 400,
            ErrorKind::Cancelled => 499,
            ErrorKind::OutOfMemory | ErrorKind::ModelLoad => 503,
            ErrorKind::Internal => 500,
        }
    }
}

/// A typed runner error, as sent on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct RunnerError {
    pub kind: ErrorKind,
    pub message: String,
}

impl RunnerError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}

/// Ollama's refusal of a prompt when its runner runs without context shift
/// (`llm/llama_server.go`, `completionPromptForRequest`).
pub const NO_SHIFT_OVERFLOW: &str = "the prompt is longer than the context length currently \
available to the model; shorten the prompt, adjust the context length in settings, or use a \
model with a longer context length";

/// `ContextOverflow` errors carry the exact text Ollama's clients get (clients match on it to
/// tell a context overflow from other failures), and the server shows it as it is.
impl RunnerError {
    /// A prompt of `n_prompt` tokens refused by a slot of `n_ctx` positions while truncation is
    /// off: llama-server's error body (`exceed_context_size_error` with both counts; it refuses
    /// `n_prompt >= n_ctx`), which Ollama forwards verbatim as its error string.
    pub fn exceeds_context(n_prompt: usize, n_ctx: usize) -> RunnerError {
        let body = serde_json::json!({"error": {
            "code": 400,
            "message": format!(
                "request ({n_prompt} tokens) exceeds the available context size ({n_ctx} \
                 tokens), try increasing it"
            ),
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n_prompt,
            "n_ctx": n_ctx,
        }});
        RunnerError::new(ErrorKind::ContextOverflow, body.to_string())
    }

    /// A prompt longer than the context while context shift is off ([`NO_SHIFT_OVERFLOW`]).
    pub fn longer_than_context() -> RunnerError {
        RunnerError::new(ErrorKind::ContextOverflow, NO_SHIFT_OVERFLOW)
    }
}

/// Body of every non-2xx response: `{"error":{"kind":…,"message":…}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: RunnerError,
}

/// `GET /health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Health {
    /// Loading; `progress` in 0.0..=1.0 and monotonically non-decreasing.
    Loading {
        progress: f32,
    },
    Ready,
    Failed {
        kind: ErrorKind,
        message: String,
    },
}

/// `GET /info`: what the runner loaded and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Info {
    /// Engine name and pin, e.g. `llama.cpp b11434`.
    pub engine: String,
    pub model_path: String,
    /// Context length per slot.
    pub n_ctx: u32,
    pub n_parallel: u32,
    pub n_vocab: u32,
    pub n_embd: u32,
    /// Trained context length from the model metadata.
    pub n_ctx_train: u32,
    /// True when the model produces embeddings (pooling) rather than completions.
    pub embedding: bool,
    /// Bytes of model weights + KV cache + compute buffers, as the engine reports them.
    pub memory_bytes: u64,
    /// Bytes of that on accelerators.
    pub memory_device_bytes: u64,
    /// Token ids that end generation (EOS/EOT).
    pub eog_tokens: Vec<i32>,
    /// Where the model's layers went: one entry per device that holds any (issue 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub placement: Vec<LayerPlacement>,
    /// Memory per device (host RAM first, then each accelerator): what this runner holds there
    /// and the device's free/total. `memory_bytes` is the sum of every device's holdings and
    /// `memory_device_bytes` the sum over non-CPU devices. Empty from runners that do not
    /// report it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<DeviceMemory>,
}

/// Layers of the model on one device (`/info`'s `placement`): repeating layers plus the output
/// layer, as the engine assigned them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LayerPlacement {
    /// The engine's device name (`CPU`, `CUDA0`, `RPC0`, …).
    pub device: String,
    /// Its description (for an RPC device, the endpoint it is reached at).
    pub description: String,
    /// On another host, through ggml RPC.
    pub remote: bool,
    pub layers: u32,
}

/// What kind of memory a device has; everything but `Cpu` counts as accelerator memory
/// (`/api/ps`'s `size_vram`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    #[default]
    Cpu,
    Gpu,
    /// An integrated GPU (shares host memory but is allocated through its own backend).
    Igpu,
    Accel,
}

/// One device's memory as a runner sees it after loading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct DeviceMemory {
    /// The backend's device name, e.g. `CPU`, `CUDA0`, `Metal`.
    pub name: String,
    /// Human-readable description, e.g. the GPU's marketing name.
    pub description: String,
    pub kind: DeviceKind,
    /// Bytes free on the device now (after this runner's allocations).
    pub free: u64,
    pub total: u64,
    /// Model weights this runner placed here (mmapped files included for host RAM).
    pub weights: u64,
    /// KV cache (and the logits output buffer) here.
    pub kv_cache: u64,
    /// Compute (graph) buffers reserved here.
    pub compute: u64,
}

impl DeviceMemory {
    /// Everything this runner holds on the device.
    pub fn held(&self) -> u64 {
        self.weights + self.kv_cache + self.compute
    }
}

/// A prompt: text (tokenized by the runner) or token ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Tokens(Vec<i32>),
}

impl Default for Prompt {
    fn default() -> Self {
        Prompt::Text(String::new())
    }
}

/// Sampling parameters. Defaults are Ollama's (`api.DefaultOptions`), not llama.cpp's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Sampling {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub typical_p: f32,
    pub repeat_last_n: i32,
    pub repeat_penalty: f32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// Negative = random.
    pub seed: i64,
}

impl Default for Sampling {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.0,
            typical_p: 1.0,
            repeat_last_n: 64,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: -1,
        }
    }
}

/// Output constraint applied by the runner's grammar engine (llguidance).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Constraint {
    /// Any JSON value (Ollama's `format: "json"`).
    Json {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        thinking_close: Vec<String>,
    },
    /// A JSON schema.
    JsonSchema {
        schema: serde_json::Value,
        /// Strings that end the thinking the response begins with; empty = the constraint applies
        /// from the first token (DESIGN 6).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        thinking_close: Vec<String>,
    },
}

/// `POST /completion`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionRequest {
    pub prompt: Prompt,
    /// Add BOS/EOS per the model's tokenizer settings when tokenizing a text prompt.
    pub add_special: bool,
    /// Parse special-token text (`<|im_start|>`) in a text prompt as special tokens.
    pub parse_special: bool,
    pub sampling: Sampling,
    /// Tokens to generate; negative = unlimited, which the runner bounds at 10 × n_ctx.
    pub num_predict: i32,
    /// Tokens from the prompt start kept on a context shift.
    pub num_keep: i32,
    pub stop: Vec<String>,
    /// On overflow during generation: shift the context (true) or stop with `length` (false).
    pub shift: bool,
    /// A prompt longer than the context: keep `num_keep` + the tail (true) or fail with
    /// `ContextOverflow` (false).
    pub truncate: bool,
    /// Reuse the longest common prefix with the slot's previous prompt.
    pub cache_prompt: bool,
    pub logprobs: bool,
    /// 0..=20.
    pub top_logprobs: u32,
    pub constraint: Option<Constraint>,
    /// Images placed in a text prompt, in prompt order (empty for text-only requests).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<PromptImage>,
}

/// One image in a text prompt, already decoded and bounded by the server (a runner never
/// parses an image file): RGB pixels, so the runner's only work is the projector's own resize.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptImage {
    /// Byte offset in the text prompt where the image goes (a char boundary; offsets never
    /// decrease from one image to the next).
    pub offset: usize,
    /// Hex SHA-256 of the image file as sent: equal ids are the same pixels, so a runner's
    /// prefix cache may key the image's positions by it.
    pub id: String,
    pub width: u32,
    pub height: u32,
    /// `width * height * 3` bytes, row-major RGB8 (base64 in JSON).
    #[serde(with = "rgb_base64")]
    pub rgb: Vec<u8>,
}

impl std::fmt::Debug for PromptImage {
    /// Pixels are never printed (logs carry sizes only).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PromptImage")
            .field("offset", &self.offset)
            .field("id", &self.id)
            .field("width", &self.width)
            .field("height", &self.height)
            .finish_non_exhaustive()
    }
}

mod rgb_base64 {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.as_bytes())
            .map_err(serde::de::Error::custom)
    }
}

impl Default for CompletionRequest {
    fn default() -> Self {
        Self {
            prompt: Prompt::default(),
            add_special: true,
            parse_special: true,
            sampling: Sampling::default(),
            num_predict: -1,
            num_keep: 4,
            stop: Vec::new(),
            shift: true,
            truncate: true,
            cache_prompt: true,
            logprobs: false,
            top_logprobs: 0,
            constraint: None,
            images: Vec::new(),
        }
    }
}

/// One alternative token with its log-probability.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
}

/// Log-probability of one generated token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenLogprob {
    pub token: String,
    pub logprob: f32,
    pub bytes: Vec<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub top_logprobs: Vec<TopLogprob>,
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DoneReason {
    /// EOS, a stop string, or the grammar accepted and ended.
    Stop,
    /// num_predict reached, or the context filled with shift off.
    Length,
}

/// Final counters of one completion. Durations are integer nanoseconds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Timings {
    /// Prompt tokens evaluated by this request (the cached ones are `cached_tokens`).
    pub prompt_eval_count: u32,
    pub prompt_eval_duration_ns: u64,
    pub eval_count: u32,
    pub eval_duration_ns: u64,
    /// Prompt tokens reused from the slot's cache (not evaluated again).
    pub cached_tokens: u32,
    /// Speculative decoding: draft tokens verified by the target (grammar fast-forward, n-gram
    /// or draft model), and how many of them sampling confirmed. Absent when nothing was
    /// drafted (not an Ollama field: herd's server logs it and counts it in its metrics).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drafted: u32,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub accepted: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One line of the `/completion` NDJSON stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CompletionChunk {
    /// Text of one or more tokens. Text is whole UTF-8; a stop string's possible prefix is held
    /// back until it is known not to be one.
    Token {
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        logprobs: Vec<TokenLogprob>,
        /// On a request's first token chunk only: the whole prompt's token count (cached
        /// included), so a client can report input tokens before the stream ends.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_tokens: Option<u32>,
    },
    Done {
        done_reason: DoneReason,
        #[serde(flatten)]
        timings: Timings,
    },
    Error {
        #[serde(flatten)]
        error: RunnerError,
    },
    /// A heartbeat while the prompt is evaluated: `processed` of its tokens are in the KV so far.
    /// Sent after each prefill chunk, so a long prefill is never mistaken for a stuck runner; the
    /// server's client consumes it (it never reaches a completion's consumers).
    Progress { processed: u32 },
}

/// `POST /embed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EmbedRequest {
    pub inputs: Vec<Prompt>,
    /// Truncate inputs longer than the context (true) or fail with `ContextOverflow` (false).
    pub truncate: bool,
    /// The `num_ctx` the request asked for, which Ollama measures each input against even
    /// below the smallest context a runner loads with; `None`: the context loaded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub num_ctx: Option<u32>,
}

impl Default for EmbedRequest {
    fn default() -> Self {
        Self {
            inputs: Vec::new(),
            truncate: true,
            num_ctx: None,
        }
    }
}

/// Raw (not normalized) embeddings, one per input, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EmbedResponse {
    pub embeddings: Vec<Vec<f32>>,
    pub prompt_eval_count: u32,
}

/// `POST /tokenize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizeRequest {
    pub content: String,
    #[serde(default)]
    pub add_special: bool,
    #[serde(default)]
    pub parse_special: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizeResponse {
    pub tokens: Vec<i32>,
}

/// `POST /detokenize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeRequest {
    pub tokens: Vec<i32>,
    /// Render special tokens as their text (true) or drop them (false).
    #[serde(default)]
    pub render_special: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetokenizeResponse {
    pub content: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_with_flat_tags() {
        let done = CompletionChunk::Done {
            done_reason: DoneReason::Length,
            timings: Timings {
                prompt_eval_count: 3,
                eval_count: 2,
                ..Default::default()
            },
        };
        let line = serde_json::to_string(&done).unwrap();
        assert!(line.starts_with(r#"{"type":"done","done_reason":"length","prompt_eval_count":3"#));
        assert_eq!(
            serde_json::from_str::<CompletionChunk>(&line).unwrap(),
            done
        );

        let err = CompletionChunk::Error {
            error: RunnerError::new(ErrorKind::OutOfMemory, "x"),
        };
        let line = serde_json::to_string(&err).unwrap();
        assert_eq!(
            line,
            r#"{"type":"error","kind":"OutOfMemory","message":"x"}"#
        );
    }

    #[test]
    fn health_is_tagged_by_status() {
        let h: Health = serde_json::from_str(r#"{"status":"loading","progress":0.5}"#).unwrap();
        assert_eq!(h, Health::Loading { progress: 0.5 });
        assert_eq!(
            serde_json::to_string(&Health::Ready).unwrap(),
            r#"{"status":"ready"}"#
        );
    }

    #[test]
    fn prompt_accepts_text_or_tokens_and_defaults_are_ollamas() {
        let r: CompletionRequest = serde_json::from_str(r#"{"prompt":[1,2,3]}"#).unwrap();
        assert_eq!(r.prompt, Prompt::Tokens(vec![1, 2, 3]));
        assert_eq!(r.sampling.top_k, 40);
        assert_eq!(r.num_predict, -1);
        let r: CompletionRequest = serde_json::from_str(r#"{"prompt":"hi"}"#).unwrap();
        assert_eq!(r.prompt, Prompt::Text("hi".into()));
    }
}
