//! `GET /metrics` (the Prometheus text exposition of `crate::metrics`) and the middleware that
//! counts every HTTP response by route template, method and status. The route label is the
//! router's matched template (`/api/blobs/{digest}`, never the raw path) or `unmatched` for
//! the 404 fallback, so clients cannot grow the label set.

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;

pub async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        state.metrics.render(),
    )
        .into_response()
}

/// Counts the response once its head is ready (a stream's later `{"error":…}` line is part of
/// a 200 response, as the client sees it).
pub async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |m| m.as_str().to_owned());
    let method = req.method().clone();
    let resp = next.run(req).await;
    state
        .metrics
        .request(&route, method.as_str(), resp.status().as_u16());
    resp
}
