//! `POST /api/create` (Ollama's `CreateHandler`): decode the request, refuse bad names, paths and
//! digests before anything streams, pull a `from` model that is not in the store (as Ollama's
//! `parseFromModel` does; its progress lines come first), then run
//! `crate::create::create_model_with` (quantizing with the configured runner) on a blocking
//! thread and deliver the progress as NDJSON (default) or, with `"stream": false`, only the last
//! progress object. Create's own refusals
//! all happen before its first progress line, so without a pull they keep their real status code
//! in both modes; a failed pull, like Ollama's, ends a stream with an `{"error":…}` line.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;

use super::error::OJson;
use super::stream::{ndjson, ChunkStream};
use super::AppState;
use crate::create::{create_model_with, precheck, CreateRequest, Progress};
use crate::error::{Error, Result};
use crate::store::registry::{self, Registry, RegistryOptions};
use crate::store::{ModelName, Store};

pub async fn create(
    State(state): State<AppState>,
    OJson(mut req): OJson<CreateRequest>,
) -> Response {
    // `from` a cloud reference makes a stub of Ollama's cloud model (as `remote_host` would).
    if req.remote_host.is_empty() && crate::remote::modelref::is_cloud(&req.from) {
        req.remote_host = state.remote.cloud.origin();
    }
    if let Err(e) = precheck(&req) {
        return e.into_response();
    }
    if let Err(e) = check_base_host(&state, &req).await {
        return e.into_response();
    }
    let stream = req.stream != Some(false);
    let chunks = spawn(state, req);
    if stream {
        ndjson(chunks).await
    } else {
        last(chunks).await
    }
}

/// `HERD_ALLOW_PULL_HOSTS`: a `from` model that would be pulled from a host not allowed is
/// refused before anything streams (a local model of that name is no fetch, so it passes).
async fn check_base_host(state: &AppState, req: &CreateRequest) -> Result<()> {
    if !state.pull_hosts.is_restricted() || req.from.is_empty() || !req.remote_host.is_empty() {
        return Ok(());
    }
    let Ok(name) = ModelName::parse(&req.from) else {
        return Ok(()); // `missing_base` reports the bad name with its usual error.
    };
    if state.check_pull_host(&name).is_ok() {
        return Ok(());
    }
    let (store, req) = (state.store.clone(), req.clone());
    let missing = tokio::task::spawn_blocking(move || missing_base(&store, &req))
        .await
        .map_err(|e| Error::Internal(e.to_string()))??;
    match missing {
        Some(name) => state.check_pull_host(&name),
        None => Ok(()),
    }
}

/// The `from` model when it names a model the store does not have.
fn missing_base(store: &Store, req: &CreateRequest) -> Result<Option<ModelName>> {
    // A stub's `from` names the remote's model: nothing to find or pull here.
    if req.from.is_empty() || !req.remote_host.is_empty() {
        return Ok(None);
    }
    let name = ModelName::parse(&req.from)?;
    Ok(store.find(&name)?.is_none().then_some(name))
}

/// Pulls (if needed) then creates. A client that goes away does not cancel the create: like
/// Ollama, a create that has validated its inputs runs to completion.
fn spawn(state: AppState, req: CreateRequest) -> ChunkStream<Progress> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Result<Progress>>();
    tokio::spawn(async move {
        let store = state.store.clone();
        let pulled = async {
            let lookup = {
                let (store, req) = (store.clone(), req.clone());
                tokio::task::spawn_blocking(move || missing_base(&store, &req)).await
            };
            let Some(base) = lookup.map_err(|e| Error::Internal(e.to_string()))?? else {
                return Ok(());
            };
            let registry = match state.registry.clone() {
                Some(r) => r,
                None => Registry::new(store.clone(), RegistryOptions::default())?,
            };
            let sink_tx = tx.clone();
            let sink: registry::ProgressFn = Arc::new(move |p: registry::Progress| {
                let _ = sink_tx.send(Ok(Progress {
                    status: p.status,
                    digest: p.digest,
                    total: p.total,
                    completed: p.completed,
                }));
            });
            registry.pull(&base, base.is_insecure(), sink).await
        }
        .await;
        if let Err(e) = pulled {
            let _ = tx.send(Err(e));
            return;
        }
        let progress_tx = tx.clone();
        let quantizer = state.quantizer.clone();
        let result = tokio::task::spawn_blocking(move || {
            create_model_with(&store, &req, &quantizer, &mut |p| {
                let _ = progress_tx.send(Ok(p));
            })
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()));
        if let Err(e) = result.and_then(|r| r) {
            let _ = tx.send(Err(e));
        }
    });
    Box::pin(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
}

/// Ollama's `waitForStream`: the last progress object, or the error with its status.
async fn last(mut chunks: ChunkStream<Progress>) -> Response {
    let mut latest = Progress::default();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            Ok(p) => latest = p,
            Err(e) => return e.into_response(),
        }
    }
    Json(latest).into_response()
}
