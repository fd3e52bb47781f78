//! `POST /api/create` (Ollama's `CreateHandler`): decode the request, refuse bad names, paths and
//! digests before anything streams, then run `crate::create::create_model` on a blocking thread
//! and deliver its progress as NDJSON (default) or, with `"stream": false`, only the last
//! progress object. Because every refusal happens before the first progress line, errors keep
//! their real status code in both modes (Ollama streams some of them as a 200 + error line).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;

use super::error::OJson;
use super::stream::{ndjson, ChunkStream};
use super::AppState;
use crate::create::{create_model, precheck, CreateRequest, Progress};
use crate::store::Store;

pub async fn create(State(state): State<AppState>, OJson(req): OJson<CreateRequest>) -> Response {
    if let Err(e) = precheck(&req) {
        return e.into_response();
    }
    let stream = req.stream != Some(false);
    let chunks = spawn(state.store.clone(), req);
    if stream {
        ndjson(chunks).await
    } else {
        last(chunks).await
    }
}

/// Runs the create on a blocking thread. A client that goes away does not cancel it: like
/// Ollama, a create that has validated its inputs runs to completion.
fn spawn(store: Store, req: CreateRequest) -> ChunkStream<Progress> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::task::spawn_blocking(move || {
        let result = create_model(&store, &req, &mut |p| {
            let _ = tx.blocking_send(Ok(p));
        });
        if let Err(e) = result {
            let _ = tx.blocking_send(Err(e));
        }
    });
    Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx))
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
