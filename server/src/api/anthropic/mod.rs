//! Anthropic-compatible `POST /v1/messages`. Translation only: the Messages request becomes a
//! native `ChatRequest` (`request`), runs through the native `/api/chat` handler, and the reply
//! or chunks are rewritten as a `message` object or the `message_start` … `message_stop` event
//! stream (`response`). Errors keep the native status with Anthropic's error body.
//!
//! `thinking` is passed on only to models that can think (Ollama drops it silently elsewhere,
//! where the native handler would refuse it).

pub mod request;
pub mod response;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::openai::error::{anthropic_response, ApiError};
use crate::api::openai::native::{self, Reply};
use crate::api::openai::{chat, common, sse};
use crate::api::AppState;

pub async fn messages(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match run(state, body).await {
        Ok(r) => r,
        Err(e) => anthropic_response(&e),
    }
}

/// Whether `model` is stored and can think; unknown models answer false (the native handler
/// then reports them).
async fn can_think(state: &AppState, model: &str) -> bool {
    use crate::api::inference::{resolve_model, NameErrors};
    matches!(resolve_model(state, model, NameErrors::NotFound).await, Ok(m) if m.can("thinking"))
}

async fn run(state: AppState, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    let req: request::MessagesRequest = common::decode(body)?;
    let streaming = req.stream.unwrap_or(false);
    let thinking = request::thinking(req.thinking.as_ref(), req.output_config.as_ref());
    let think = match thinking {
        Some(t) if can_think(&state, &req.model).await => Some(t),
        _ => None,
    };
    let native_req = request::to_native(req, think)?;
    let reply = native::chat(&state, native_req).await?;
    let id = common::random_id("msg_", 24);
    if streaming {
        return Ok(sse::response(
            reply.into_stream(),
            response::EventFrames::new(id),
        ));
    }
    let r = match reply {
        Reply::One(r) => r,
        Reply::Stream(s) => chat::fold(s).await?,
    };
    // Go's float text for the tool-use `input` (the body's only floats), as Ollama marshals it.
    let body = response::message(&r, &id);
    Ok(Json(crate::api::gomarshal::Go(&body)).into_response())
}
