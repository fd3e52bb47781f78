//! Liveness, readiness and draining. `/healthz` answers 200 while the process serves HTTP;
//! `/readyz` answers 200 only when the store is readable, the runner binary is present and
//! executable, and the server is not draining. [`Lifecycle`] owns the draining flag and the
//! count of admitted requests whose responses (streams included) have not finished: `admit`
//! refuses new work with 503 once draining starts, and `wait_idle` lets shutdown wait for the
//! admitted ones to end (bounded by `HERD_SHUTDOWN_GRACE` at the call site).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::body::{Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use hyper::body::{Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::Notify;

use super::AppState;
use crate::error::Error;

#[derive(Debug, Default)]
pub struct Lifecycle {
    draining: AtomicBool,
    in_flight: AtomicUsize,
    idle: Notify,
    /// The runner binary readiness checks for; `None`: not checked (no engine configured).
    runner: Option<PathBuf>,
}

impl Lifecycle {
    pub fn new(runner: Option<PathBuf>) -> Lifecycle {
        Lifecycle {
            runner,
            ..Lifecycle::default()
        }
    }

    /// Stop admitting new requests (readyz turns 503).
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
        self.idle.notify_waiters();
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Admitted requests whose response has not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Resolves when no admitted request is in flight, or after `grace`; true when idle.
    pub async fn wait_idle(&self, grace: Duration) -> bool {
        let wait = async {
            loop {
                let notified = self.idle.notified();
                if self.in_flight() == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(grace, wait).await.is_ok()
    }

    fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }
}

/// One admitted request; dropped when its response body is finished or abandoned.
struct InFlight(Arc<Lifecycle>);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Paths that stay served while draining: the probes and the metrics scrape.
fn exempt(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// Middleware: 503 for new requests once draining; otherwise counts the request as in flight
/// until its body (a stream, possibly) has been sent or dropped.
pub async fn admit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_owned();
    if exempt(&path) {
        return next.run(req).await;
    }
    if state.lifecycle.is_draining() {
        return super::auth::error_response(&path, Error::Draining);
    }
    let guard = state.lifecycle.enter();
    let resp = next.run(req).await;
    resp.map(|inner| {
        Body::new(Tracked {
            inner,
            _guard: guard,
        })
    })
}

/// A response body that keeps its request counted as in flight until it is finished or
/// dropped. Delegates everything, so `Content-Length` and end-of-stream stay as they were.
struct Tracked {
    inner: Body,
    _guard: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pub async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({ "status": "ok" }))
}

/// Why the server is not ready, or `None` when it is.
pub fn not_ready(state: &AppState) -> Option<String> {
    if state.lifecycle.is_draining() {
        return Some("draining".into());
    }
    if let Err(e) = std::fs::read_dir(state.store.root()) {
        return Some(format!("model store not readable: {e}"));
    }
    if let Some(runner) = &state.lifecycle.runner {
        use std::os::unix::fs::PermissionsExt;
        match std::fs::metadata(runner) {
            Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => {}
            Ok(_) => return Some(format!("runner {} is not executable", runner.display())),
            Err(e) => return Some(format!("runner {}: {e}", runner.display())),
        }
    }
    None
}

pub async fn readyz(State(state): State<AppState>) -> Response {
    let s = state.clone();
    let reason = tokio::task::spawn_blocking(move || not_ready(&s))
        .await
        .unwrap_or_else(|e| Some(format!("readiness check failed: {e}")));
    match reason {
        None => Json(serde_json::json!({ "status": "ready" })).into_response(),
        Some(r) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": format!("not ready: {r}") })),
        )
            .into_response(),
    }
}
