//! `GET /metrics` (the Prometheus text exposition of `crate::metrics`) and the middleware that
//! counts every HTTP response by route template, method and status. The route label is the
//! router's matched template (`/api/blobs/{digest}`, never the raw path) or `unmatched` for
//! the 404 fallback, and a method outside HTTP's standard set is `other`, so clients (counted
//! before the API-key check) cannot grow the label set.

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
    let method = method_label(req.method()).to_owned();
    let resp = next.run(req).await;
    state
        .metrics
        .request(&route, &method, resp.status().as_u16());
    resp
}

/// The `method` label: one of HTTP's standard methods, else `other`.
pub fn method_label(m: &http::Method) -> &str {
    use http::Method as M;
    const KNOWN: [M; 9] = [
        M::GET,
        M::HEAD,
        M::POST,
        M::PUT,
        M::DELETE,
        M::OPTIONS,
        M::PATCH,
        M::CONNECT,
        M::TRACE,
    ];
    if KNOWN.contains(m) {
        m.as_str()
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn methods_are_bounded() {
        let table = [
            (http::Method::GET, "GET"),
            (http::Method::DELETE, "DELETE"),
            (http::Method::from_bytes(b"BREW").unwrap(), "other"),
            (http::Method::from_bytes(b"get").unwrap(), "other"),
        ];
        for (m, want) in table {
            assert_eq!(method_label(&m), want, "{m}");
        }
    }
}
