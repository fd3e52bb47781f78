//! OpenAI-compatible endpoints (`/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`,
//! `/v1/models`, `/v1/models/{model}`, `/v1/responses`). Translation only (DESIGN, api/): each
//! request becomes the native request type and runs through the native handler (`native`);
//! the native reply is rewritten into OpenAI's shapes, streams as server-sent events (`sse`),
//! and errors keep the native status with OpenAI's error body (`error`).

pub mod chat;
pub mod common;
pub mod completions;
pub mod embeddings;
pub mod error;
pub mod models;
pub mod native;
pub mod responses;
pub mod sse;

use axum::routing::{get, post};
use axum::Router;

use super::AppState;

/// The OpenAI routes, merged into the app ahead of its middleware.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/v1/completions", post(completions::completions))
        .route("/v1/embeddings", post(embeddings::embeddings))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/models", get(models::list))
        // Names may contain '/' (`namespace/model:tag`, `host/namespace/model`).
        .route("/v1/models/{*model}", get(models::retrieve))
}
