//! `herd serve` + `herd push` / `herd pull` against the real loopback registry, and a pull
//! survives a SIGKILL of the server: the restarted server resumes from the `-partial` files.

mod registry_support;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use registry_support::*;
use server::store::{ModelName, Store};

#[test]
fn cli_push_rm_pull_round_trip() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let models = t.path().join("models");
    let store = Store::open(&models).unwrap();
    let name = reg.name("library/tiny:q4");
    let text = format!("http://127.0.0.1:{}/library/tiny:q4", reg.port);
    let manifest = make_model(&store, &name, 5, 300_000);
    let serve = Serve::start(&models, t.path());
    assert!(
        t.path().join(".ollama/id_ed25519").exists(),
        "serve creates the key pair"
    );

    let (ok, err) = serve.herd(&["push", &text]);
    assert!(!ok && err.contains("insecure protocol http"), "{err}");
    let (ok, err) = serve.herd(&["push", &text, "--insecure"]);
    assert!(ok, "{err}");
    assert!(
        err.contains("pushing manifest") && err.contains("success"),
        "{err}"
    );
    let (ok, err) = serve.herd(&["rm", &text]);
    assert!(ok, "{err}");
    assert!(store.read(&name).unwrap().is_none());
    let (ok, err) = serve.herd(&["pull", &text, "--insecure"]);
    assert!(ok, "{err}");
    for s in [
        "pulling manifest",
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ] {
        assert!(err.contains(s), "{s}: {err}");
    }
    assert!(err.contains("100% ▕"), "{err}");
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, manifest);
    let (ok, err) = serve.herd(&[
        "pull",
        &format!("http://127.0.0.1:{}/library/nope", reg.port),
        "--insecure",
    ]);
    assert!(
        !ok && err.contains("pull model manifest: file does not exist"),
        "{err}"
    );
}

/// Forwards 127.0.0.1:<returned port> to `upstream`, counting bytes sent back to the client.
async fn counting_proxy(upstream: u16, count: Arc<AtomicU64>) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut down, _)) = l.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(mut up) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (mut dr, mut dw) = down.split();
                let (mut ur, mut uw) = up.split();
                let to_up = tokio::io::copy(&mut dr, &mut uw);
                let to_down = async {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
                        let n = match ur.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if dw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        count.fetch_add(n as u64, Ordering::Relaxed);
                    }
                };
                tokio::select! { _ = to_up => {}, _ = to_down => {} }
            });
        }
    });
    port
}

fn persisted(blobs: &Path) -> u64 {
    std::fs::read_dir(blobs)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.contains("-partial-")
        })
        .map(|e| {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
            v["Completed"].as_u64().unwrap()
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_pull_then_restart_resumes() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let src = tempfile::tempdir().unwrap();
    let src_store = Store::open(src.path()).unwrap();
    let direct = reg.name("library/big:latest");
    let manifest = make_model(&src_store, &direct, 9, 96 << 20);
    registry(&src_store, test_options(None))
        .push(&direct, true, server::store::registry::progress::discard())
        .await
        .unwrap();
    let total = src_store.read(&direct).unwrap().unwrap().size;

    let count = Arc::new(AtomicU64::new(0));
    let port = counting_proxy(reg.port, count.clone()).await;
    let text = format!("http://127.0.0.1:{port}/library/big:latest");
    let name = ModelName::parse(&text).unwrap();
    let t = tempfile::tempdir().unwrap();
    let models = t.path().join("models");
    let store = Store::open(&models).unwrap();

    let mut serve = Serve::start(&models, t.path());
    let url = format!("http://{}/api/pull", serve.addr);
    let body = serde_json::json!({ "model": text, "insecure": true });
    let pull = tokio::spawn(reqwest::Client::new().post(url).json(&body).send());
    let deadline = Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::Relaxed) < total / 2 {
        assert!(Instant::now() < deadline, "pull made no progress");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    serve.child.kill().unwrap(); // SIGKILL
    serve.child.wait().unwrap();
    let _ = pull.await;
    let sent_before = count.load(Ordering::Relaxed);
    let kept = persisted(store.blobs().dir());
    assert!(
        store.read(&name).unwrap().is_none(),
        "no manifest before all blobs"
    );

    let serve = Serve::start(&models, t.path());
    count.store(0, Ordering::Relaxed);
    let body = serde_json::json!({ "model": text, "insecure": true, "stream": false });
    let r = reqwest::Client::new()
        .post(format!("http://{}/api/pull", serve.addr))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "{\"status\":\"success\"}");
    let after = count.load(Ordering::Relaxed);
    assert_eq!(store.read(&name).unwrap().unwrap().bytes, manifest);
    let reused = total.saturating_sub(after);
    println!(
        "sigkill: proxy sent {sent_before} B before the kill, {kept} B were on disk, {reused} B reused, {after} B fetched after restart (of {total})"
    );
    assert!(kept > 0);
    assert!(
        reused as f64 >= 0.9 * kept as f64,
        "reused {reused} of {kept}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_pull_error_shapes() {
    let Some(reg) = RealRegistry::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let serve = Serve::start(&t.path().join("models"), t.path());
    let http = reqwest::Client::new();
    let post = |path: &str, body: serde_json::Value| {
        http.post(format!("http://{}{path}", serve.addr))
            .json(&body)
            .send()
    };
    let missing = format!("http://127.0.0.1:{}/library/nope:latest", reg.port);
    // Streamed: a first status line, then the error line, status 200.
    let r = post(
        "/api/pull",
        serde_json::json!({"model": missing, "insecure": true}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "application/x-ndjson"
    );
    assert_eq!(
        r.text().await.unwrap(),
        "{\"status\":\"pulling manifest\"}\n{\"error\":\"pull model manifest: file does not exist\"}\n"
    );
    // Not streamed: 500 with the error.
    let r = post(
        "/api/pull",
        serde_json::json!({"name": missing, "insecure": true, "stream": false}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.text().await.unwrap(),
        "{\"error\":\"pull model manifest: file does not exist\"}"
    );
    // Bad names and bodies.
    let r = post("/api/pull", serde_json::json!({"model": "a/b/c/d/e"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(
        r.text().await.unwrap(),
        "{\"error\":\"invalid model name\"}"
    );
    let r = post("/api/push", serde_json::json!({"model": "http://127.0.0.1:1/library/absent", "insecure": true, "stream": false}))
        .await
        .unwrap();
    assert_eq!(r.status(), 500);
    assert_eq!(
        r.text().await.unwrap(),
        "{\"error\":\"model '127.0.0.1:1/library/absent:latest' not found\"}"
    );
}
