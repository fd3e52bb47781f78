//! `HERD_ALLOW_PULL_HOSTS` against the real registry (Debian's `docker-registry` on loopback):
//! a pull from the allowed host works through the API; pull, push and create naming another
//! host answer 403 with Ollama's error shape before any connection is made to that host.

#[path = "api_support/mod.rs"]
mod api_support;
mod registry_support;

use registry_support::*;
use serde_json::json;
use server::api::{app, AppState};
use server::store::registry::progress;
use server::store::Store;

#[tokio::test]
async fn only_allowed_registry_hosts_are_contacted() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    // What a client may pull: pushed to the registry from another store.
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let name = reg.name("library/tiny:q4");
    make_model(&src_store, &name, 7, 300_000);
    registry(&src_store, test_options(None))
        .push(&name, true, progress::discard())
        .await
        .unwrap();

    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let hosts = server::config::PullHosts(vec![format!("127.0.0.1:{}", reg.port)]);
    let app = app(AppState::new(store.clone())
        .with_registry(registry(&store, test_options(None)))
        .with_pull_hosts(hosts));

    let model = format!("http://127.0.0.1:{}/library/tiny:q4", reg.port);
    let r = api_support::post_json(
        &app,
        "/api/pull",
        json!({"model": model, "insecure": true, "stream": false}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["status"], "success");
    assert!(store.read(&name).unwrap().is_some(), "pulled");

    // Another host: a listener we own, which must never see a connection.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    other.set_nonblocking(true).unwrap();
    let other_host = format!("127.0.0.1:{}", other.local_addr().unwrap().port());
    let other_model = format!("http://{other_host}/library/tiny:q4");
    let refused = json!({"error": format!(
        "registry host '{other_host}' is not allowed on this server (HERD_ALLOW_PULL_HOSTS)"
    )});
    for (path, body) in [
        ("/api/pull", json!({"model": other_model, "insecure": true})),
        (
            "/api/pull",
            json!({"model": other_model, "insecure": true, "stream": false}),
        ),
        ("/api/push", json!({"model": other_model, "insecure": true})),
        ("/api/create", json!({"model": "made", "from": other_model})),
    ] {
        let r = api_support::post_json(&app, path, body.clone()).await;
        assert_eq!(r.status, 403, "{path} {body}: {}", r.text());
        assert_eq!(r.json(), refused, "{path}");
    }
    assert!(
        matches!(other.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the refused host was contacted"
    );
    // Creating from a model already in the store fetches nothing, whatever host it names: the
    // request gets past the host check to the local model (whose fake GGUF is then refused).
    let local = server::store::ModelName::parse(&other_model).unwrap();
    make_model(&store, &local, 8, 1000);
    let r = api_support::post_json(
        &app,
        "/api/create",
        json!({"model": "made", "from": other_model, "stream": false}),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("invalid GGUF"), "{}", r.text());
}
