//! `HEAD/POST /api/blobs/:digest`: 201 for new content, 200 for existing content without reading
//! the body, 400 on mismatch, and every hostile digest spelling rejected with the store (and its
//! parent directory) byte-for-byte unchanged.

mod api_support;

use api_support::*;
use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn upload_new_existing_and_mismatched() {
    let ts = TestStore::new();
    let app = ts.app();
    let data = b"hello blob".to_vec();
    let hex = sha256_hex(&data);
    let uri = format!("/api/blobs/sha256:{hex}");

    let r = send(&app, request(Method::HEAD, &uri, Body::empty())).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = send(&app, request(Method::POST, &uri, data.clone())).await;
    assert_eq!((r.status, r.body.len()), (StatusCode::CREATED, 0));
    assert_eq!(
        std::fs::read(ts.root().join(format!("blobs/sha256-{hex}"))).unwrap(),
        data
    );
    let r = send(&app, request(Method::HEAD, &uri, Body::empty())).await;
    assert_eq!(r.status, StatusCode::OK);
    // The `sha256-` spelling names the same blob.
    let r = send(
        &app,
        request(
            Method::HEAD,
            &format!("/api/blobs/sha256-{hex}"),
            Body::empty(),
        ),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);

    // Existing: 200 without touching the body (a body that errors when read proves it).
    let poisoned = Body::from_stream(futures_util::stream::iter(vec![Err::<Vec<u8>, _>(
        std::io::Error::other("the body must not be read"),
    )]));
    let r = send(&app, request(Method::POST, &uri, poisoned)).await;
    assert_eq!(r.status, StatusCode::OK);

    // Mismatch: 400 with Ollama's wording, nothing stored.
    let before = ts.snapshot();
    let other = "0".repeat(64);
    let r = send(
        &app,
        request(
            Method::POST,
            &format!("/api/blobs/sha256:{other}"),
            data.clone(),
        ),
    )
    .await;
    assert_eq!(
        (r.status, r.json()),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": format!("digest mismatch, expected \"sha256:{other}\", got \"sha256:{hex}\"")})
        )
    );
    assert_eq!(ts.snapshot(), before);
}

#[tokio::test]
async fn upload_streams_a_large_body_in_chunks() {
    let ts = TestStore::new();
    let app = ts.app();
    let chunk = vec![7u8; 64 << 10];
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..64).map(|_| Ok(chunk.clone())).collect();
    let mut all = Vec::new();
    for c in &chunks {
        all.extend_from_slice(c.as_ref().unwrap());
    }
    let hex = sha256_hex(&all);
    let body = Body::from_stream(futures_util::stream::iter(chunks));
    let r = send(
        &app,
        request(Method::POST, &format!("/api/blobs/sha256:{hex}"), body),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    let stored = std::fs::metadata(ts.root().join(format!("blobs/sha256-{hex}"))).unwrap();
    assert_eq!(stored.len(), 4 << 20);
}

#[tokio::test]
async fn hostile_digests_are_rejected_and_change_nothing() {
    let ts = TestStore::new();
    ts.model("m", "latest", &tiny_gguf(), &[], ago(5));
    let app = ts.app();
    let before = ts.snapshot();
    let hex = "a".repeat(64);
    let hostile = [
        "sha256:..%2F..%2Fx".to_string(),
        "sha256-..".to_string(),
        "sha256:..".to_string(),
        "..%2F..%2Fetc%2Fpasswd".to_string(),
        format!("sha256:{}", "a".repeat(63)),
        format!("sha256:{}", "a".repeat(65)),
        format!("sha256:{}", "A".repeat(64)),
        format!("sha256:{}%00", &hex[..63]),
        format!("sha256:{hex}%2F..%2F..%2Fx"),
        format!("sha512:{hex}"),
        hex.clone(),
        format!("sha256:{}", "g".repeat(64)),
        "sha256:%2Fetc%2Fpasswd".to_string(),
        "sha256:..%5C..%5Cx".to_string(),
    ];
    for d in &hostile {
        for method in [Method::POST, Method::HEAD] {
            let r = send(
                &app,
                request(
                    method.clone(),
                    &format!("/api/blobs/{d}"),
                    b"payload".to_vec(),
                ),
            )
            .await;
            assert_eq!(
                r.status,
                StatusCode::BAD_REQUEST,
                "{method} {d}: {}",
                r.text()
            );
            if method == Method::POST {
                assert_eq!(r.json(), json!({"error": "invalid digest format"}), "{d}");
            }
        }
    }
    assert_eq!(ts.snapshot(), before);
}

#[tokio::test]
async fn head_missing_blob_names_it() {
    let app = TestStore::new().app();
    let d = format!("sha256:{}", "b".repeat(64));
    let r = send(
        &app,
        request(Method::HEAD, &format!("/api/blobs/{d}"), Body::empty()),
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // HEAD responses carry no body; the same lookup through POST's sibling is covered above.
}
