//! Browser-facing and connection-level protections: the DNS-rebinding Host guard on a loopback
//! bind, the CORS origin policy (preflight and simple requests), and the header-read timeout
//! that drops slowloris connections on the real accept loop.

mod api_support;

use std::time::Duration;

use api_support::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use server::api::{app, serve, AppState, CorsPolicy, HostGuard, ServeOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn guarded_app(ts: &TestStore) -> axum::Router {
    let guard = HostGuard::new(
        "127.0.0.1:11434".parse().unwrap(),
        Some("testbox".into()),
        vec![],
    );
    app(AppState::new(ts.store()).with_host_guard(guard))
}

fn with_host(method: Method, uri: &str, host: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("host", host)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn loopback_bind_rejects_foreign_hosts() {
    let ts = TestStore::new();
    let app = guarded_app(&ts);
    for (host, want) in [
        ("evil.example", StatusCode::FORBIDDEN),
        ("evil.example:11434", StatusCode::FORBIDDEN),
        (":11434", StatusCode::FORBIDDEN),
        ("localhost:11434", StatusCode::OK),
        ("127.0.0.1:11434", StatusCode::OK),
        ("[::1]:11434", StatusCode::OK),
        ("testbox", StatusCode::OK),
        ("dev.localhost", StatusCode::OK),
        // Issue 22 item 4: a Host that only starts with an allowed host is foreign.
        ("localhost:11434.evil.com", StatusCode::FORBIDDEN),
        ("127.0.0.1:11434@evil.com", StatusCode::FORBIDDEN),
        ("[::1]:11434.evil.com", StatusCode::FORBIDDEN),
        ("localhost:99999", StatusCode::FORBIDDEN),
    ] {
        let r = send(&app, with_host(Method::GET, "/api/tags", host)).await;
        assert_eq!(r.status, want, "Host: {host}");
    }
    // A rejected request never reaches a handler: delete of an existing model is refused.
    ts.model("keep", "latest", &tiny_gguf(), &[], ago(1));
    let req = Request::builder()
        .method(Method::DELETE)
        .uri("/api/delete")
        .header("host", "rebound.example")
        .body(Body::from(r#"{"model":"keep"}"#))
        .unwrap();
    assert_eq!(send(&app, req).await.status, StatusCode::FORBIDDEN);
    assert!(ts.manifest_path("keep", "latest").exists());
}

#[tokio::test]
async fn public_bind_does_not_check_hosts() {
    let ts = TestStore::new();
    let guard = HostGuard::new("0.0.0.0:11434".parse().unwrap(), None, vec![]);
    let app = app(AppState::new(ts.store()).with_host_guard(guard));
    let r = send(&app, with_host(Method::GET, "/", "evil.example")).await;
    assert_eq!(r.status, StatusCode::OK);
}

fn preflight(origin: &str) -> Request<Body> {
    Request::builder()
        .method(Method::OPTIONS)
        .uri("/api/chat")
        .header("host", "localhost:11434")
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn cors_allows_local_origins_and_refuses_others() {
    let ts = TestStore::new();
    let app = guarded_app(&ts);
    let r = send(&app, preflight("http://localhost:3000")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "http://localhost:3000"
    );
    assert!(r.headers["access-control-allow-methods"]
        .to_str()
        .unwrap()
        .contains("POST"));
    assert!(r.headers["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .contains("Content-Type"));

    let r = send(&app, preflight("https://evil.example")).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(!r.headers.contains_key("access-control-allow-origin"));

    // Simple requests: allowed origin gets the header, a foreign one is refused.
    let mut req = request(Method::GET, "/api/tags", Body::empty());
    req.headers_mut()
        .insert("origin", "vscode-webview://abc".parse().unwrap());
    let r = send(&app, req).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "vscode-webview://abc"
    );
    let mut req = request(Method::GET, "/api/tags", Body::empty());
    req.headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    assert_eq!(send(&app, req).await.status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn ollama_origins_extends_the_list() {
    let ts = TestStore::new();
    let mut origins = vec!["https://app.example".to_string()];
    origins.extend(server::config::Origins::default().allowed());
    let app = app(AppState::new(ts.store()).with_cors(CorsPolicy::new(&origins)));
    let r = send(&app, preflight("https://app.example")).await;
    assert_eq!(r.status, StatusCode::NO_CONTENT);
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "https://app.example"
    );
}

#[tokio::test]
async fn slow_request_heads_are_disconnected() {
    let ts = TestStore::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let opts = ServeOptions {
        header_read_timeout: Duration::from_millis(300),
        shutdown_grace: Duration::from_secs(1),
        ..ServeOptions::default()
    };
    let server = tokio::spawn(serve(listener, ts.app(), opts, async {
        let _ = stop_rx.await;
    }));

    // A well-behaved request is answered.
    let mut ok = tokio::net::TcpStream::connect(addr).await.unwrap();
    ok.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut resp = String::new();
    ok.read_to_string(&mut resp).await.unwrap();
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.ends_with("Ollama is running"), "{resp}");

    // A client that never finishes its head is cut off after the timeout.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: loc")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut buf)).await;
    assert!(read.is_ok(), "connection was not closed by the server");
    assert!(started.elapsed() < Duration::from_secs(3));

    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("graceful shutdown finished")
        .unwrap()
        .unwrap();
}
