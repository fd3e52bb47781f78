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
pub mod gostructs;
pub mod models;
pub mod native;
pub mod responses;
pub mod sse;

use axum::http::Method;
use axum::routing::{get, post};

use super::{route, Route};

/// The OpenAI routes, part of the app's one route table (`api::routes`).
pub fn routes() -> Vec<Route> {
    const GET: &[Method] = &[Method::GET];
    const POST: &[Method] = &[Method::POST];
    vec![
        route("/v1/chat/completions", POST, post(chat::chat_completions)),
        route("/v1/completions", POST, post(completions::completions)),
        route("/v1/embeddings", POST, post(embeddings::embeddings)),
        route("/v1/responses", POST, post(responses::responses)),
        route("/v1/models", GET, get(models::list)),
        // Names may contain '/' (`namespace/model:tag`, `host/namespace/model`).
        route("/v1/models/{*model}", GET, get(models::retrieve)),
    ]
}
