//! `POST /api/pull` and `POST /api/push`: Ollama's request shape (`model`|`name`, `insecure`,
//! `stream`, default true) over `store::registry`. Streamed: NDJSON progress lines, a failure
//! after the first line is a final `{"error":…}` line with status 200 (so an unknown model gives
//! `pulling manifest` then `{"error":"pull model manifest: file does not exist"}`). Not streamed:
//! the last progress object, or 500 with the error (Ollama's `waitForStream`).
//!
//! The transfer runs in a task owned by the response stream: a client that disconnects drops
//! the stream, which aborts the task (a resumed pull picks up the `-partial` files).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt as _;
use serde::Deserialize;

use super::{stream, AppState, OJson};
use crate::error::Error;
use crate::store::registry::{Progress, Registry, RegistryOptions};
use crate::store::ModelName;

#[derive(Debug, Deserialize)]
pub struct TransferRequest {
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub insecure: bool,
    pub stream: Option<bool>,
}

#[derive(Clone, Copy)]
enum Direction {
    Pull,
    Push,
}

pub async fn pull(State(state): State<AppState>, OJson(req): OJson<TransferRequest>) -> Response {
    transfer(state, req, Direction::Pull).await
}

pub async fn push(State(state): State<AppState>, OJson(req): OJson<TransferRequest>) -> Response {
    transfer(state, req, Direction::Push).await
}

/// Aborts the transfer task when the response stream is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn transfer(state: AppState, req: TransferRequest, dir: Direction) -> Response {
    let raw = if req.model.is_empty() {
        req.name
    } else {
        req.model
    };
    // A pull of a cloud reference (`m:tag:cloud`) fetches the registry's stub under its legacy
    // name (`m:tag-cloud`), as Ollama's `NormalizePullName`.
    let raw = match dir {
        Direction::Pull => match crate::remote::modelref::pull_name(&raw) {
            Ok(name) => name.unwrap_or(raw),
            Err(conflict) => return crate::error::Error::BadRequest(conflict).into_response(),
        },
        Direction::Push => raw,
    };
    let name = match ModelName::parse(&raw) {
        Ok(n) => n,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = state.check_pull_host(&name) {
        return e.into_response();
    }
    let registry = match state.registry.clone() {
        Some(r) => r,
        None => match Registry::new(state.store.clone(), RegistryOptions::default()) {
            Ok(r) => r,
            Err(e) => return e.into_response(),
        },
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<crate::error::Result<Progress>>();
    let sink_tx = tx.clone();
    let sink: crate::store::registry::ProgressFn = std::sync::Arc::new(move |p| {
        let _ = sink_tx.send(Ok(p));
    });
    let insecure = req.insecure;
    let task = tokio::spawn(async move {
        let r = match dir {
            Direction::Pull => registry.pull(&name, insecure, sink).await,
            Direction::Push => registry.push(&name, insecure, sink).await,
        };
        if let Err(e) = r {
            let _ = tx.send(Err(e));
        }
    });
    let guard = AbortOnDrop(task);
    let chunks = tokio_stream::wrappers::UnboundedReceiverStream::new(rx).map(move |item| {
        let _keep = &guard;
        item
    });
    if req.stream.unwrap_or(true) {
        return stream::ndjson(Box::pin(chunks)).await;
    }
    let mut chunks = Box::pin(chunks);
    let mut last = None;
    while let Some(item) = chunks.next().await {
        match item {
            Ok(p) => last = Some(p),
            Err(e) => return internal(e),
        }
    }
    match last {
        Some(p) => Json(p).into_response(),
        None => internal(Error::Internal("transfer ended without a status".into())),
    }
}

/// `waitForStream` answers every failure with 500.
fn internal(e: Error) -> Response {
    (
        http::StatusCode::INTERNAL_SERVER_ERROR,
        Json(serde_json::json!({ "error": e.to_string() })),
    )
        .into_response()
}
