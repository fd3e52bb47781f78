//! The one seam between the compatibility layers and the native handlers. A translated request
//! goes through the very handler that serves `/api/chat`, `/api/generate`, `/api/embed`,
//! `/api/tags` or `/api/show` — same validation, scheduling and error texts — and its reply is
//! read back as native wire types: an error (status + message), one folded reply, or a stream
//! of NDJSON chunks. A native stream that fails midway ends with an `{"error": …}` line; that
//! line becomes an `Err` item here and nothing follows it.
//!
//! Dropping a returned stream drops the native response body, which cancels the generation
//! exactly as a disconnecting `/api` client does.

use std::pin::Pin;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::Response;
use futures_util::{Stream, StreamExt};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;
use crate::api::models::{ListResponse, ShowRequest, ShowResponse};
use crate::api::types::{
    ChatRequest, ChatResponse, EmbedRequest, EmbedResponse, GenerateRequest, GenerateResponse,
};
use crate::api::{AppState, OJson};

/// Native chunks, or the error that ended the stream.
pub type NativeStream<T> = Pin<Box<dyn Stream<Item = Result<T, ApiError>> + Send>>;

/// What a native handler answered with a 200.
pub enum Reply<T> {
    /// A folded (`stream: false`) reply, or a bare one such as a load-only answer.
    One(T),
    Stream(NativeStream<T>),
}

impl<T: Send + 'static> Reply<T> {
    /// Either form as a stream (a single reply is a one-chunk stream).
    pub fn into_stream(self) -> NativeStream<T> {
        match self {
            Reply::One(t) => Box::pin(futures_util::stream::once(async move { Ok(t) })),
            Reply::Stream(s) => s,
        }
    }
}

/// The metrics Ollama's wire leaves out come back from the native response's extensions: a
/// streamed reply's first chunk gets `metrics.prompt_announced`, the final chunk (streamed or
/// not) `metrics.prompt_cached`.
pub async fn chat(state: &AppState, req: ChatRequest) -> Result<Reply<ChatResponse>, ApiError> {
    use crate::api::stream::{PromptCached, PromptTokens};
    let resp = crate::api::generate::chat(State(state.clone()), OJson(req)).await;
    let announced = resp.extensions().get::<PromptTokens>().map(|p| p.0);
    let cached = resp.extensions().get::<PromptCached>().cloned();
    let finish = move |mut c: ChatResponse| {
        if let (true, Some(cached)) = (c.done, &cached) {
            c.metrics.prompt_cached = cached.get();
        }
        c
    };
    Ok(match read(resp).await? {
        Reply::Stream(s) => {
            let mut first = true;
            Reply::Stream(Box::pin(s.map(move |item| {
                item.map(|mut c: ChatResponse| {
                    if std::mem::take(&mut first) {
                        if let Some(n) = announced {
                            c.metrics.prompt_announced = n;
                        }
                    }
                    finish(c)
                })
            })))
        }
        Reply::One(c) => Reply::One(finish(c)),
    })
}

pub async fn generate(
    state: &AppState,
    req: GenerateRequest,
) -> Result<Reply<GenerateResponse>, ApiError> {
    read(crate::api::generate::generate(State(state.clone()), OJson(req)).await).await
}

pub async fn embed(state: &AppState, req: EmbedRequest) -> Result<EmbedResponse, ApiError> {
    let axum::Json(r) = crate::api::embed::embed(State(state.clone()), OJson(req)).await?;
    Ok(r)
}

pub async fn tags(state: &AppState) -> Result<ListResponse, ApiError> {
    let axum::Json(r) = crate::api::models::tags(State(state.clone())).await?;
    Ok(r)
}

pub async fn show(state: &AppState, model: &str) -> Result<ShowResponse, ApiError> {
    let req = ShowRequest {
        model: Some(model.to_owned()),
        ..ShowRequest::default()
    };
    // `/v1/models/{model}` reads only the dates and name, never model_info: no user agent.
    let axum::Json(r) = crate::api::models::show(
        State(state.clone()),
        axum::http::HeaderMap::new(),
        OJson(req),
    )
    .await?;
    Ok(r)
}

/// Reads a native handler's response (see module docs).
pub async fn read<T>(resp: Response) -> Result<Reply<T>, ApiError>
where
    T: DeserializeOwned + Send + 'static,
{
    let status = resp.status();
    let ndjson = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(crate::api::stream::NDJSON));
    if status.is_success() && ndjson {
        return Ok(Reply::Stream(lines(resp.into_body())));
    }
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .to_bytes();
    if !status.is_success() {
        return Err(ApiError::new(status, error_message(&bytes)));
    }
    serde_json::from_slice(&bytes)
        .map(Reply::One)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// The message of a native `{"error": "…"}` body; any other body is shown as text.
pub fn error_message(body: &[u8]) -> String {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => match m.get("error") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::from_utf8_lossy(body).into_owned(),
        },
        _ => String::from_utf8_lossy(body).trim().to_owned(),
    }
}

/// One NDJSON line: a chunk, or the trailing error line.
pub fn parse_line<T: DeserializeOwned>(line: &[u8]) -> Result<T, ApiError> {
    let internal = |m: String| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, m);
    let v: Value = serde_json::from_slice(line).map_err(|e| internal(e.to_string()))?;
    if let Some(e) = v.get("error") {
        return Err(internal(
            e.as_str().map_or_else(|| e.to_string(), str::to_owned),
        ));
    }
    serde_json::from_value(v).map_err(|e| internal(e.to_string()))
}

struct Lines {
    body: axum::body::BodyDataStream,
    buf: Vec<u8>,
    eof: bool,
    failed: bool,
}

/// Splits a native NDJSON body into parsed chunks; the first error ends the stream.
fn lines<T>(body: Body) -> NativeStream<T>
where
    T: DeserializeOwned + Send + 'static,
{
    let st = Lines {
        body: body.into_data_stream(),
        buf: Vec::new(),
        eof: false,
        failed: false,
    };
    Box::pin(futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if st.failed {
                return None;
            }
            if let Some(pos) = st.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = st.buf.drain(..=pos).collect();
                if line.trim_ascii().is_empty() {
                    continue;
                }
                let item = parse_line(&line);
                st.failed = item.is_err();
                return Some((item, st));
            }
            if st.eof {
                if st.buf.trim_ascii().is_empty() {
                    return None;
                }
                let line = std::mem::take(&mut st.buf);
                let item = parse_line(&line);
                st.failed = true;
                return Some((item, st));
            }
            match st.body.next().await {
                Some(Ok(b)) => st.buf.extend_from_slice(&b),
                Some(Err(e)) => {
                    st.failed = true;
                    let e = ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
                    return Some((Err(e), st));
                }
                None => st.eof = true,
            }
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;
    use axum::response::IntoResponse;

    /// A body made of `parts`, each sent as its own frame (tests use it to split lines anywhere).
    fn body_of(parts: Vec<&'static str>) -> Body {
        Body::from_stream(futures_util::stream::iter(parts.into_iter().map(|p| {
            Ok::<axum::body::Bytes, std::convert::Infallible>(axum::body::Bytes::from_static(
                p.as_bytes(),
            ))
        })))
    }

    fn ndjson(parts: Vec<&'static str>) -> Response {
        let mut r = Response::new(body_of(parts));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        r
    }

    async fn all(resp: Response) -> Vec<Result<GenerateResponse, ApiError>> {
        match read::<GenerateResponse>(resp).await {
            Ok(Reply::Stream(s)) => s.collect().await,
            _ => panic!("expected a stream"),
        }
    }

    #[tokio::test]
    async fn lines_split_across_frames_and_trailing_error() {
        let items = all(ndjson(vec![
            "{\"model\":\"m\",\"created_at\":\"t\",\"resp",
            "onse\":\"a\",\"done\":false}\n{\"model\":\"m\",\"created_at\":\"t\",\"response\":\"b\",\"done\":false}\n",
            "{\"error\":\"llama runner process has terminated\"}\n",
            "{\"model\":\"m\",\"created_at\":\"t\",\"response\":\"never\",\"done\":false}\n",
        ]))
        .await;
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap().response, "a");
        assert_eq!(items[1].as_ref().unwrap().response, "b");
        assert_eq!(
            items[2].as_ref().unwrap_err().message,
            "llama runner process has terminated"
        );
    }

    #[tokio::test]
    async fn last_line_without_newline_is_read() {
        let items = all(ndjson(vec![
            "{\"model\":\"m\",\"created_at\":\"t\",\"response\":\"\",\"done\":true,\"done_reason\":\"stop\"}",
        ]))
        .await;
        assert_eq!(items.len(), 1);
        assert_eq!(
            items[0].as_ref().unwrap().done_reason.as_deref(),
            Some("stop")
        );
    }

    #[tokio::test]
    async fn errors_and_single_replies() {
        let resp = crate::error::Error::NotFound("model 'x' not found".into()).into_response();
        let Err(e) = read::<GenerateResponse>(resp).await else {
            panic!("expected an error")
        };
        assert_eq!(
            e,
            ApiError::new(StatusCode::NOT_FOUND, "model 'x' not found")
        );
        let resp = (
            StatusCode::OK,
            axum::Json(
                serde_json::json!({"model":"m","created_at":"t","response":"hi","done":true}),
            ),
        )
            .into_response();
        let Ok(Reply::One(r)) = read::<GenerateResponse>(resp).await else {
            panic!("expected one reply")
        };
        assert_eq!(r.response, "hi");
        assert_eq!(error_message(b"404 page not found"), "404 page not found");
    }
}
