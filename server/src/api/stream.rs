//! Delivering a stream of response chunks the way Ollama does (`streamResponse`,
//! `writeChatResponse`):
//! - streamed: NDJSON (`application/x-ndjson`), one object per line. A failure before the first
//!   chunk is an ordinary error response with its real status; after it, a final
//!   `{"error": …}` line ends the stream and the status stays 200.
//! - not streamed: chunks are folded into one reply — text and thinking concatenated, logprobs
//!   appended, the last chunk's metadata kept (chat keeps every tool call only when the request
//!   offered tools) — and any failure becomes the error response.
//!
//! Dropping the response body (client gone) drops the chunk stream, which is how cancellation
//! reaches the scheduler and runner.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{Stream, StreamExt};
use serde::Serialize;

use super::types::{ChatResponse, GenerateResponse};
use crate::error::{Error, Result};

pub const NDJSON: &str = "application/x-ndjson";

/// A fallible stream of chunks, as the scheduler seam produces them.
pub type ChunkStream<T> = Pin<Box<dyn Stream<Item = Result<T>> + Send>>;

fn line<T: Serialize>(chunk: &T) -> Bytes {
    match serde_json::to_vec(chunk) {
        Ok(mut v) => {
            v.push(b'\n');
            Bytes::from(v)
        }
        Err(e) => error_line(&Error::Json(e)),
    }
}

fn error_line(e: &Error) -> Bytes {
    let mut v = serde_json::to_vec(&serde_json::json!({ "error": e.client_message() }))
        .unwrap_or_else(|_| br#"{"error":"internal error"}"#.to_vec());
    v.push(b'\n');
    Bytes::from(v)
}

/// Streams `chunks` as NDJSON (see module docs for error placement).
pub async fn ndjson<T>(mut chunks: ChunkStream<T>) -> Response
where
    T: Serialize + Send + 'static,
{
    let first = match chunks.next().await {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => return e.into_response(),
        None => None,
    };
    let body = futures_util::stream::unfold(
        (first, chunks, false),
        |(pending, mut rest, ended)| async move {
            if ended {
                return None;
            }
            if let Some(c) = pending {
                return Some((Ok::<Bytes, Infallible>(line(&c)), (None, rest, false)));
            }
            match rest.next().await {
                None => None,
                Some(Ok(c)) => Some((Ok(line(&c)), (None, rest, false))),
                Some(Err(e)) => {
                    tracing::error!(error = %e, "stream failed after the first chunk");
                    Some((Ok(error_line(&e)), (None, rest, true)))
                }
            }
        },
    );
    let mut resp = Response::new(Body::from_stream(body));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(NDJSON));
    resp
}

/// The non-streamed `/api/generate` reply.
pub async fn collect_generate(
    mut chunks: ChunkStream<GenerateResponse>,
) -> Result<GenerateResponse> {
    let mut last: Option<GenerateResponse> = None;
    let (mut text, mut thinking, mut logprobs) = (String::new(), String::new(), Vec::new());
    while let Some(chunk) = chunks.next().await {
        let mut c = chunk?;
        text.push_str(&c.response);
        thinking.push_str(&c.thinking);
        logprobs.append(&mut c.logprobs);
        last = Some(c);
    }
    let mut r = last.ok_or_else(|| Error::Internal("the model produced no response".into()))?;
    r.response = text;
    r.thinking = thinking;
    r.logprobs = logprobs;
    Ok(r)
}

/// The non-streamed `/api/chat` reply. Tool calls from every chunk are kept only when the
/// request offered tools (Ollama's rule); otherwise the last chunk's stand.
pub async fn collect_chat(
    mut chunks: ChunkStream<ChatResponse>,
    request_has_tools: bool,
) -> Result<ChatResponse> {
    let mut last: Option<ChatResponse> = None;
    let (mut text, mut thinking, mut logprobs, mut calls) =
        (String::new(), String::new(), Vec::new(), Vec::new());
    while let Some(chunk) = chunks.next().await {
        let mut c = chunk?;
        text.push_str(&c.message.content);
        thinking.push_str(&c.message.thinking);
        logprobs.append(&mut c.logprobs);
        if request_has_tools {
            calls.extend(c.message.tool_calls.iter().cloned());
        }
        last = Some(c);
    }
    let mut r = last.ok_or_else(|| Error::Internal("the model produced no response".into()))?;
    r.message.content = text;
    r.message.thinking = thinking;
    r.logprobs = logprobs;
    if !calls.is_empty() {
        r.message.tool_calls = calls;
    }
    Ok(r)
}

/// Streams or folds a generate stream, per the request's `stream` flag.
pub async fn respond_generate(chunks: ChunkStream<GenerateResponse>, stream: bool) -> Response {
    if stream {
        ndjson(chunks).await
    } else {
        match collect_generate(chunks).await {
            Ok(r) => (StatusCode::OK, Json(r)).into_response(),
            Err(e) => e.into_response(),
        }
    }
}

/// The prompt's token count, known when a chat stream's first chunk is (see `respond_chat`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptTokens(pub u64);

/// Of the final chunk's prompt, the tokens the runner reused from its cache
/// (`Metrics::prompt_cached`, which Ollama's wire does not carry), for the in-process translation
/// layers (`/v1/responses` usage). Set before the final chunk is serialized, so a reader that has
/// parsed the `done` line sees the count.
#[derive(Debug, Clone, Default)]
pub struct PromptCached(pub Arc<AtomicU64>);

impl PromptCached {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Streams or folds a chat stream, per the request's `stream` flag.
pub async fn respond_chat(
    chunks: ChunkStream<ChatResponse>,
    stream: bool,
    request_has_tools: bool,
) -> Response {
    let cached = PromptCached::default();
    let cell = cached.0.clone();
    let chunks: ChunkStream<ChatResponse> = Box::pin(chunks.inspect(move |c| {
        if let Ok(c) = c {
            if c.done {
                cell.store(c.metrics.prompt_cached, Ordering::Release);
            }
        }
    }));
    let mut resp = respond_chat_inner(chunks, stream, request_has_tools).await;
    resp.extensions_mut().insert(cached);
    resp
}

async fn respond_chat_inner(
    chunks: ChunkStream<ChatResponse>,
    stream: bool,
    request_has_tools: bool,
) -> Response {
    if stream {
        // The first chunk's prompt size rides along as a response extension for the in-process
        // translation layers (the Anthropic stream's message_start); the wire never shows it.
        let mut chunks = chunks;
        let first = chunks.next().await;
        let announced = match &first {
            Some(Ok(c)) => c.metrics.prompt_announced.max(c.metrics.prompt_eval_count),
            _ => 0,
        };
        let mut resp = ndjson(Box::pin(futures_util::stream::iter(first).chain(chunks))).await;
        if announced > 0 {
            resp.extensions_mut().insert(PromptTokens(announced));
        }
        resp
    } else {
        match collect_chat(chunks, request_has_tools).await {
            Ok(r) => (StatusCode::OK, Json(r)).into_response(),
            Err(e) => e.into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::types::{Logprob, Message, Metrics, ToolCall, ToolCallFunction};
    use http_body_util::BodyExt;

    fn gen(text: &str, done: bool) -> GenerateResponse {
        GenerateResponse {
            model: "m:latest".into(),
            created_at: "t".into(),
            response: text.into(),
            done,
            done_reason: done.then(|| "stop".into()),
            metrics: Metrics {
                eval_count: u64::from(done) * 2,
                ..Metrics::default()
            },
            ..Default::default()
        }
    }

    fn boxed<T: Send + 'static>(items: Vec<Result<T>>) -> ChunkStream<T> {
        Box::pin(futures_util::stream::iter(items))
    }

    async fn body_of(resp: Response) -> (StatusCode, Option<String>, String) {
        let status = resp.status();
        let ct = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, ct, String::from_utf8(bytes.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn ndjson_lines_then_done() {
        let resp = ndjson(boxed(vec![
            Ok(gen("Hel", false)),
            Ok(gen("lo", false)),
            Ok(gen("", true)),
        ]))
        .await;
        let (status, ct, body) = body_of(resp).await;
        assert_eq!((status, ct.as_deref()), (StatusCode::OK, Some(NDJSON)));
        assert_eq!(
            body,
            "{\"model\":\"m:latest\",\"created_at\":\"t\",\"response\":\"Hel\",\"done\":false}\n\
             {\"model\":\"m:latest\",\"created_at\":\"t\",\"response\":\"lo\",\"done\":false}\n\
             {\"model\":\"m:latest\",\"created_at\":\"t\",\"response\":\"\",\"done\":true,\"done_reason\":\"stop\",\"eval_count\":2}\n"
        );
    }

    #[tokio::test]
    async fn error_before_first_chunk_keeps_its_status() {
        let resp = ndjson(boxed::<GenerateResponse>(vec![Err(Error::QueueFull)])).await;
        let (status, ct, body) = body_of(resp).await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ct.as_deref(), Some("application/json"));
        assert_eq!(
            body,
            r#"{"error":"server busy, please try again.  maximum pending requests exceeded"}"#
        );
    }

    #[tokio::test]
    async fn error_mid_stream_is_a_trailing_line_and_ends_the_stream() {
        let resp = ndjson(boxed(vec![
            Ok(gen("a", false)),
            Err(Error::RunnerExited(
                "llama runner process has terminated".into(),
            )),
            Ok(gen("never sent", false)),
        ]))
        .await;
        let (status, _, body) = body_of(resp).await;
        assert_eq!(status, StatusCode::OK);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 2, "{body}");
        assert_eq!(
            lines[1],
            r#"{"error":"llama runner process has terminated"}"#
        );
    }

    #[tokio::test]
    async fn generate_aggregation_keeps_last_metadata() {
        let mut first = gen("Hel", false);
        first.thinking = "hm".into();
        first.logprobs = vec![Logprob::default()];
        let mut last = gen("", true);
        last.context = vec![1, 2, 3];
        let r = collect_generate(boxed(vec![Ok(first), Ok(gen("lo", false)), Ok(last)]))
            .await
            .unwrap();
        assert_eq!(r.response, "Hello");
        assert_eq!(r.thinking, "hm");
        assert_eq!(r.logprobs.len(), 1);
        assert_eq!((r.done, r.done_reason.as_deref()), (true, Some("stop")));
        assert_eq!(r.context, vec![1, 2, 3]);
        assert_eq!(r.metrics.eval_count, 2);

        let err = collect_generate(boxed(vec![Ok(gen("a", false)), Err(Error::Cancelled)]))
            .await
            .unwrap_err();
        assert_eq!(err.status(), 499);
    }

    #[tokio::test]
    async fn chat_aggregation_and_tool_calls() {
        let chunk = |content: &str, tool: Option<&str>, done: bool| ChatResponse {
            model: "m".into(),
            created_at: "t".into(),
            message: Message {
                tool_calls: tool
                    .map(|n| {
                        vec![ToolCall {
                            id: String::new(),
                            function: ToolCallFunction {
                                index: 0,
                                name: n.into(),
                                arguments: Default::default(),
                            },
                        }]
                    })
                    .unwrap_or_default(),
                ..Message::assistant(content)
            },
            done,
            ..Default::default()
        };
        let chunks = || {
            boxed(vec![
                Ok(chunk("I'll ", Some("a"), false)),
                Ok(chunk("check", Some("b"), false)),
                Ok(chunk("", None, true)),
            ])
        };
        let r = collect_chat(chunks(), true).await.unwrap();
        assert_eq!(r.message.content, "I'll check");
        let names: Vec<_> = r
            .message
            .tool_calls
            .iter()
            .map(|t| t.function.name.as_str())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(r.done);
        let r = collect_chat(chunks(), false).await.unwrap();
        assert!(r.message.tool_calls.is_empty(), "last chunk had none");

        let resp = respond_chat(chunks(), false, true).await;
        let (status, ct, body) = body_of(resp).await;
        assert_eq!(
            (status, ct.as_deref()),
            (StatusCode::OK, Some("application/json"))
        );
        assert!(body.starts_with(r#"{"model":"m","created_at":"t","message":{"role":"assistant","content":"I'll check""#), "{body}");
    }
}
