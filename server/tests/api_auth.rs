//! API keys (`HERD_API_KEYS`): every route of the router's one table refuses a request without
//! a valid key with 401 in its API's own error shape, except the probes; a valid key (Bearer,
//! or `x-api-key` on /v1/messages) passes; without keys configured nothing changes.

mod api_support;

use api_support::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use server::api::auth::ApiKeys;
use server::api::{app, routes, AppState};

const KEY: &str = "sk-herd-test-0123456789";

fn locked(ts: &TestStore) -> axum::Router {
    app(AppState::new(ts.store()).with_api_keys(ApiKeys::new([KEY, "second-key"])))
}

/// A concrete URI for a route pattern: each `{param}` / `{*rest}` segment becomes a value.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            if seg.starts_with("{*") {
                "some/model:latest"
            } else if seg.starts_with('{') {
                "sha256-0000000000000000000000000000000000000000000000000000000000000000"
            } else {
                seg
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

fn req(method: &Method, uri: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut b = Request::builder().method(method.clone()).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::empty()).unwrap()
}

/// Asserts the 401 body is in the shape of the API `path` belongs to.
fn assert_401_shape(path: &str, method: &Method, r: &Reply) {
    let what = format!("{method} {path}");
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{what}: {}", r.text());
    assert_eq!(r.headers["www-authenticate"], "Bearer", "{what}");
    if method == Method::HEAD {
        return; // no body on HEAD
    }
    let body = r.json();
    assert!(!r.text().contains(KEY), "{what}: key echoed");
    if path == "/v1/messages" {
        assert_eq!(body["type"], "error", "{what}: {body}");
        assert_eq!(body["error"]["type"], "authentication_error", "{what}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("API key"));
    } else if path.starts_with("/v1/") {
        assert_eq!(
            body["error"]["type"], "invalid_request_error",
            "{what}: {body}"
        );
        assert_eq!(body["error"]["code"], "invalid_api_key", "{what}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("API key"));
        assert!(body["error"].get("param").is_some(), "{what}");
    } else {
        let msg = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{what}: {body}"));
        assert!(msg.contains("API key"), "{what}: {msg}");
        assert_eq!(body.as_object().unwrap().len(), 1, "{what}: {body}");
    }
}

#[tokio::test]
async fn every_route_requires_a_key_except_the_probes() {
    let ts = TestStore::new();
    let app = locked(&ts);
    let table = routes();
    assert!(table.len() > 20, "route table looks incomplete");
    let mut public = Vec::new();
    for route in &table {
        let uri = concrete(route.path);
        for m in route.methods {
            if server::api::auth::is_public(route.path) {
                let r = send(&app, req(m, &uri, &[])).await;
                assert_ne!(r.status, StatusCode::UNAUTHORIZED, "{m} {}", route.path);
                public.push(route.path);
                continue;
            }
            // No credentials, a wrong key, a key in the wrong scheme: all refused.
            let bearer_wrong = format!("Bearer {KEY}x");
            let basic = format!("Basic {KEY}");
            for headers in [
                vec![],
                vec![("authorization", bearer_wrong.as_str())],
                vec![("authorization", basic.as_str())],
                vec![("authorization", "Bearer ")],
            ] {
                let r = send(&app, req(m, &uri, &headers)).await;
                assert_401_shape(route.path, m, &r);
            }
            // The right key passes the check (the handler then answers; never 401 or 405).
            let bearer = format!("Bearer {KEY}");
            let r = send(&app, req(m, &uri, &[("authorization", &bearer)])).await;
            assert!(
                r.status != StatusCode::UNAUTHORIZED && r.status != StatusCode::METHOD_NOT_ALLOWED,
                "{m} {}: {} {}",
                route.path,
                r.status,
                r.text()
            );
        }
    }
    public.dedup();
    assert_eq!(public, ["/healthz", "/readyz"]);
    // Paths outside the table are refused too (no probing for what exists).
    let r = send(&app, req(&Method::GET, "/nope", &[])).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn anthropic_accepts_x_api_key_and_others_do_not() {
    let ts = TestStore::new();
    let app = locked(&ts);
    // x-api-key reaches the handler on /v1/messages (400: empty body, not 401).
    let r = send(
        &app,
        req(
            &Method::POST,
            "/v1/messages",
            &[("x-api-key", "second-key")],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let r = send(
        &app,
        req(&Method::POST, "/v1/messages", &[("x-api-key", "wrong")]),
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json()["error"]["message"], "invalid API key");
    // ... but is not a credential for the other APIs.
    let r = send(&app, req(&Method::GET, "/api/tags", &[("x-api-key", KEY)])).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    let r = send(&app, req(&Method::GET, "/v1/models", &[("x-api-key", KEY)])).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    // Exact native body for a missing key.
    let r = send(&app, req(&Method::GET, "/api/tags", &[])).await;
    assert_eq!(
        r.text(),
        r#"{"error":"missing API key: send Authorization: Bearer <key>"}"#
    );
    let bearer = format!("bearer {KEY}");
    let r = send(
        &app,
        req(&Method::GET, "/api/tags", &[("authorization", &bearer)]),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json(), serde_json::json!({"models": []}));
}

#[tokio::test]
async fn no_keys_configured_means_open() {
    let ts = TestStore::new();
    let app = ts.app();
    let r = send(&app, req(&Method::GET, "/api/tags", &[])).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = send(&app, req(&Method::GET, "/v1/models", &[])).await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn browser_preflight_is_not_blocked_by_keys() {
    // Browsers send OPTIONS without credentials; CORS answers it before the key check.
    let ts = TestStore::new();
    let app = locked(&ts);
    let r = send(
        &app,
        req(
            &Method::OPTIONS,
            "/api/chat",
            &[
                ("host", "localhost:11434"),
                ("origin", "http://localhost:3000"),
                ("access-control-request-method", "POST"),
                ("access-control-request-headers", "authorization"),
            ],
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
}
