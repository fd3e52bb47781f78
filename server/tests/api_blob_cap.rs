//! The blob upload cap (`HERD_MAX_BLOB_SIZE`, `AppState::max_blob_size`) over real HTTP: a body
//! declared or streamed past the cap gets 413 with the limit in the message, and neither a blob
//! nor a temp file is left; a body at the cap is stored; the cap is read from the environment by
//! `herd serve` (413 from the real binary too).

mod quantize_support;

use futures_util::stream;
use sha2::{Digest as _, Sha256};

fn digest(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

fn entries(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

const MSG: &str =
    r#"{"error":"blob is larger than this server accepts (1000 bytes, HERD_MAX_BLOB_SIZE)"}"#;

#[tokio::test]
async fn uploads_over_the_cap_get_413_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = server::store::Store::open(dir.path().join("models")).unwrap();
    let blobs = store.blobs().dir().to_path_buf();
    let state = server::api::AppState::new(store).with_max_blob_size(1000);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, server::api::app(state))
            .await
            .unwrap()
    });
    let http = reqwest::Client::new();

    // Declared too large: refused before reading.
    let big = vec![7u8; 5000];
    let r = http
        .post(format!("{base}/api/blobs/{}", digest(&big)))
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.text().await.unwrap(), MSG);

    // Chunked (no length): cut off when it passes the cap.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..10).map(|_| Ok(vec![7u8; 500])).collect();
    let r = http
        .post(format!("{base}/api/blobs/{}", digest(&big)))
        .body(reqwest::Body::wrap_stream(stream::iter(chunks)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.text().await.unwrap(), MSG);
    assert_eq!(
        entries(&blobs),
        Vec::<String>::new(),
        "no blob, no temp file"
    );

    // Exactly at the cap: stored.
    let ok = vec![9u8; 1000];
    let r = http
        .post(format!("{base}/api/blobs/{}", digest(&ok)))
        .body(ok.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        entries(&blobs),
        vec![format!("sha256-{}", &digest(&ok)[7..])]
    );
}

#[tokio::test]
async fn herd_serve_reads_the_cap_from_the_environment() {
    // Any runner path will do: no model is loaded here.
    let serve = quantize_support::Serve::start(
        std::path::Path::new("/nonexistent/runner"),
        &[("HERD_MAX_BLOB_SIZE", "1000")],
    );
    let big = vec![1u8; 2000];
    let r = reqwest::Client::new()
        .post(format!("{}/api/blobs/{}", serve.base, digest(&big)))
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 413);
    assert_eq!(r.text().await.unwrap(), MSG);
    assert_eq!(serve.stray_blob_files(), Vec::<String>::new());
}
