//! `HEAD/POST /api/blobs/:digest`: content-addressed uploads (used by `create`). The digest is
//! validated by `Digest::parse_api` before anything touches the disk, so traversal spellings
//! (`../`, NUL, wrong length, uppercase, `sha256-..`) are a 400 with nothing created. Uploads
//! stream to a temp file while hashing and appear only if the hash matches; an existing blob is
//! acknowledged without reading the body.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use futures_util::TryStreamExt;
use tokio_util::io::StreamReader;

use super::models::blocking;
use super::show::go_quote;
use super::AppState;
use crate::error::{Error, Result};
use crate::store::Digest;

pub async fn head_blob(
    State(state): State<AppState>,
    Path(raw): Path<String>,
) -> Result<StatusCode> {
    let digest = Digest::parse_api(&raw)?;
    let store = state.store.clone();
    if blocking(move || Ok(store.blobs().exists(&digest))).await? {
        Ok(StatusCode::OK)
    } else {
        Err(Error::NotFound(format!(
            "blob {} not found",
            go_quote(&raw)
        )))
    }
}

pub async fn create_blob(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    body: Body,
) -> Result<StatusCode> {
    let digest = Digest::parse_api(&raw)?;
    let store = state.store.clone();
    let probe = digest.clone();
    if blocking(move || Ok(store.blobs().exists(&probe))).await? {
        return Ok(StatusCode::OK);
    }
    let reader = StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
    match state.store.blobs().write_verified(&digest, reader).await {
        Ok(bytes) => {
            tracing::debug!(%digest, bytes, "stored uploaded blob");
            Ok(StatusCode::CREATED)
        }
        // Ollama quotes the digest exactly as the client spelled it.
        Err(Error::DigestMismatch { got, .. }) => Err(Error::DigestMismatch { expected: raw, got }),
        Err(e) => Err(e),
    }
}
