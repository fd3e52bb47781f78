//! Server-sent events for the compatibility APIs: frame formatting (`data: {json}\n\n`, named
//! `event: x\ndata: {json}\n\n`, OpenAI's `data: [DONE]\n\n`) and the driver that turns a native
//! chunk stream into an SSE response through a per-API [`Frames`] translator.
//!
//! Invariant: after the translator's `error` frames nothing else is sent (the native stream
//! ends at its first error); `finish` is called only when the native stream ended cleanly.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue};
use axum::response::Response;
use futures_util::StreamExt;
use serde::Serialize;

use super::error::ApiError;
use super::native::NativeStream;

pub const EVENT_STREAM: &str = "text/event-stream";
pub const DONE: &str = "data: [DONE]\n\n";

/// `data: {json}\n\n`.
pub fn data<T: Serialize>(v: &T) -> String {
    format!("data: {}\n\n", json(v))
}

/// `event: NAME\ndata: {json}\n\n`.
pub fn event<T: Serialize>(name: &str, v: &T) -> String {
    format!("event: {name}\ndata: {}\n\n", json(v))
}

fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| {
        serde_json::json!({"error": {"message": e.to_string(), "type": "api_error"}}).to_string()
    })
}

/// Turns native chunks into SSE frames for one response.
pub trait Frames<T>: Send + 'static {
    /// Frames for one native chunk (possibly none).
    fn chunk(&mut self, chunk: T) -> String;
    /// Frames reporting a failure after the stream started; the stream ends after them.
    fn error(&mut self, e: &ApiError) -> String;
    /// Frames after the last chunk of a stream that ended cleanly.
    fn finish(&mut self) -> String;
}

/// An SSE response whose body is `frames` applied to `chunks`.
pub fn response<T, F>(chunks: NativeStream<T>, frames: F) -> Response
where
    T: Send + 'static,
    F: Frames<T>,
{
    let body = futures_util::stream::unfold(
        (chunks, frames, false),
        |(mut chunks, mut frames, ended)| async move {
            if ended {
                return None;
            }
            let (text, ended) = match chunks.next().await {
                Some(Ok(c)) => (frames.chunk(c), false),
                Some(Err(e)) => {
                    tracing::error!(error = %e.message, "compat stream failed after the first chunk");
                    (frames.error(&e), true)
                }
                None => (frames.finish(), true),
            };
            Some((Ok::<Bytes, Infallible>(Bytes::from(text)), (chunks, frames, ended)))
        },
    )
    .filter(|b| std::future::ready(b.as_ref().map_or(true, |b| !b.is_empty())));
    let mut resp = Response::new(Body::from_stream(body));
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(EVENT_STREAM));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use http_body_util::BodyExt;

    struct Echo;
    impl Frames<&'static str> for Echo {
        fn chunk(&mut self, c: &'static str) -> String {
            if c.is_empty() {
                String::new()
            } else {
                data(&c)
            }
        }
        fn error(&mut self, e: &ApiError) -> String {
            event("error", &e.message)
        }
        fn finish(&mut self) -> String {
            DONE.to_owned()
        }
    }

    async fn run(items: Vec<Result<&'static str, ApiError>>) -> (Response, String) {
        let resp = response(Box::pin(futures_util::stream::iter(items)), Echo);
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.unwrap().to_bytes();
        (
            Response::from_parts(parts, Body::empty()),
            String::from_utf8(bytes.to_vec()).unwrap(),
        )
    }

    #[tokio::test]
    async fn frames_then_done() {
        let (resp, body) = run(vec![Ok("a"), Ok(""), Ok("b")]).await;
        assert_eq!(resp.headers()[header::CONTENT_TYPE], EVENT_STREAM);
        assert_eq!(body, "data: \"a\"\n\ndata: \"b\"\n\ndata: [DONE]\n\n");
    }

    #[tokio::test]
    async fn error_ends_the_stream_without_done() {
        let (_, body) = run(vec![
            Ok("a"),
            Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "boom")),
            Ok("never"),
        ])
        .await;
        assert_eq!(body, "data: \"a\"\n\nevent: error\ndata: \"boom\"\n\n");
    }
}
