//! `HEAD/POST /api/blobs/:digest`: content-addressed uploads (used by `create`). The digest is
//! validated by `Digest::parse_api` before anything touches the disk, so traversal spellings
//! (`../`, NUL, wrong length, uppercase, `sha256-..`) are a 400 with nothing created. Uploads
//! stream to a temp file while hashing and appear only if the hash matches; an existing blob is
//! acknowledged without reading the body.
//!
//! Size cap (`AppState::max_blob_size`, `HERD_MAX_BLOB_SIZE`): a declared `Content-Length` over
//! the cap is refused before reading; an undeclared (chunked) or understated body is cut off the
//! moment it passes the cap. Both answer 413 and, as for any failed upload, the temp file is
//! removed and no blob appears.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use futures_util::{StreamExt, TryStreamExt};
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

/// Marks the I/O error that cut an upload off at the cap (so it maps to 413, not 500).
#[derive(Debug)]
struct OverCap;

impl std::fmt::Display for OverCap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("upload exceeds the blob size limit")
    }
}

impl std::error::Error for OverCap {}

/// Whether `declared` bytes may be uploaded under `cap` (0 = no limit).
fn within_cap(declared: u64, cap: u64) -> bool {
    cap == 0 || declared <= cap
}

pub async fn create_blob(
    State(state): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<StatusCode> {
    let digest = Digest::parse_api(&raw)?;
    let cap = state.max_blob_size;
    let too_large = Error::BlobTooLarge { limit: cap };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let store = state.store.clone();
    let probe = digest.clone();
    if blocking(move || Ok(store.blobs().exists(&probe))).await? {
        return Ok(StatusCode::OK);
    }
    if declared.is_some_and(|n| !within_cap(n, cap)) {
        return Err(too_large);
    }
    let mut seen = 0u64;
    let stream = body
        .into_data_stream()
        .map_err(std::io::Error::other)
        .map(move |chunk| {
            let chunk = chunk?;
            seen = seen.saturating_add(chunk.len() as u64);
            if within_cap(seen, cap) {
                Ok(chunk)
            } else {
                Err(std::io::Error::other(OverCap))
            }
        });
    let reader = StreamReader::new(stream);
    match state.store.blobs().write_verified(&digest, reader).await {
        Ok(bytes) => {
            tracing::debug!(%digest, bytes, "stored uploaded blob");
            Ok(StatusCode::CREATED)
        }
        // Ollama quotes the digest exactly as the client spelled it.
        Err(Error::DigestMismatch { got, .. }) => Err(Error::DigestMismatch { expected: raw, got }),
        Err(Error::Io(e)) if e.get_ref().is_some_and(|r| r.is::<OverCap>()) => Err(too_large),
        Err(Error::Io(e)) if super::serve::is_too_slow(&e) => Err(Error::BodyTimeout),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn cap_table() {
        for (declared, cap, ok) in [
            (0, 0, true),
            (u64::MAX, 0, true),
            (10, 10, true),
            (11, 10, false),
            (0, 1, true),
        ] {
            assert_eq!(super::within_cap(declared, cap), ok, "{declared} / {cap}");
        }
    }
}
