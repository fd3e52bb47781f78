//! A hostile registry (`registry_support::fake`) against the pull client: traversal digests,
//! size lies, wrong bytes, redirects and auth realms aimed at other hosts, endless and compressed
//! bodies, huge manifests, a full disk. Each must end in a clear error with no file created
//! outside the store, no visible partial blob, no manifest, and no request to a disallowed host.
//! Also the signed-token auth flow, verified server-side.

mod registry_support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::response::Response;
use base64::Engine as _;
use futures_util::StreamExt as _;
use http::{Method, StatusCode};
use registry_support::fake::*;
use registry_support::*;
use server::store::registry::{auth, policy, progress};
use server::store::{Digest, Store};

#[tokio::test]
async fn traversal_and_malformed_digests_are_refused_before_any_blob_request() {
    let hex = "a".repeat(64);
    let bad = [
        "sha256:../../../../tmp/pwned".to_string(),
        format!("sha256:../{}", &hex[..61]),
        format!("sha256:{}", &hex[..63]),
        format!("sha256:{hex}a"),
        format!("sha256:{}", hex.to_uppercase()),
        format!("sha256-{hex}"),
        format!("sha256:{}\\u0000", &hex[..63]),
        format!("/sha256:{hex}"),
    ];
    for d in bad {
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"x","config":{{"mediaType":"c","digest":"sha256:{hex}","size":1}},"layers":[{{"mediaType":"m","digest":"{d}","size":5}}]}}"#
        );
        let env = env_with(manifest.into_bytes(), HashMap::new(), no_hook()).await;
        let err = env.pull().await;
        assert!(
            err.to_string().starts_with("invalid manifest"),
            "{d}: {err}"
        );
        assert!(err.to_string().contains("invalid digest"), "{d}: {err}");
        assert_eq!(
            env.log.lock().unwrap().len(),
            1,
            "{d}: only the manifest was fetched"
        );
        env.assert_clean();
        assert!(!Path::new("/tmp/pwned").exists());
    }
}

#[tokio::test]
async fn size_lies_and_wrong_bytes_never_become_blobs() {
    let (manifest, blobs, m) = model();
    let big = m.layers[0].digest.to_string();
    // HEAD claims another size.
    let b = big.clone();
    let hook: Override = Arc::new(move |method, path, _| {
        (method == Method::HEAD && path.ends_with(&b)).then(|| {
            Response::builder()
                .header("content-length", "999")
                .body(Body::empty())
                .unwrap()
        })
    });
    let env = env_with(manifest.clone(), blobs.clone(), hook).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("registry reports 999 bytes"), "{err}");
    env.assert_clean();

    // Right size, wrong bytes.
    let mut wrong = blobs.clone();
    wrong.get_mut(&big).unwrap()[12345] ^= 1;
    let env = env_with(manifest.clone(), wrong, no_hook()).await;
    let err = env.pull().await.to_string();
    assert!(
        err.starts_with("digest mismatch, file must be downloaded again: want"),
        "{err}"
    );
    env.assert_clean();
    let bad = m.layers[0].digest.hex().to_owned();
    assert!(
        files(&env.parent).iter().all(|f| !f.contains(&bad)),
        "a proven-bad partial is deleted"
    );

    // A ranged reply longer than asked for (no Content-Length: streamed).
    let b = big.clone();
    let hook: Override = Arc::new(move |method, path, headers| {
        (method == Method::GET && path.ends_with(&b)).then(|| {
            let endless = futures_util::stream::repeat_with(|| {
                Ok::<_, std::io::Error>(bytes::Bytes::from(vec![0u8; 65536]))
            });
            let range = headers["range"]
                .to_str()
                .unwrap()
                .trim_start_matches("bytes=")
                .to_owned();
            Response::builder()
                .status(StatusCode::PARTIAL_CONTENT)
                .header("content-range", format!("bytes {range}/{}", 3 << 20))
                .body(Body::from_stream(endless))
                .unwrap()
        })
    });
    let env = env_with(manifest.clone(), blobs.clone(), hook).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("more than the"), "{err}");
    env.assert_clean();
}

#[tokio::test]
async fn redirects_to_other_hosts_and_foreign_realms_are_refused() {
    let (manifest, blobs, m) = model();
    // A listener on 127.0.0.2 counts any request that reaches it.
    let other_log = Arc::new(Mutex::new(Vec::new()));
    let other = Fake {
        manifest: Arc::new(Mutex::new(Vec::new())),
        blobs: Arc::new(HashMap::new()),
        log: other_log.clone(),
        hook: Arc::new(|_, _, _| Some(Response::new(Body::from(r#"{"token":"stolen"}"#)))),
    };
    let other_port = serve("127.0.0.2", other).await;
    let big = m.layers[0].digest.to_string();
    for target in [
        format!("http://127.0.0.2:{other_port}/blob"),
        format!("https://127.0.0.2:{other_port}/blob"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "https://169.254.169.254/latest/meta-data/".to_string(),
        "https://example.com/cdn/blob".to_string(),
        "file:///etc/passwd".to_string(),
    ] {
        let b = big.clone();
        let t2 = target.clone();
        let hook: Override = Arc::new(move |_, path, _| {
            path.ends_with(&b).then(|| {
                Response::builder()
                    .status(StatusCode::TEMPORARY_REDIRECT)
                    .header("location", t2.clone())
                    .body(Body::empty())
                    .unwrap()
            })
        });
        let env = env_with(manifest.clone(), blobs.clone(), hook).await;
        let err = env.pull().await.to_string();
        assert!(
            err.contains("refusing") || err.contains("unsupported scheme"),
            "{target}: {err}"
        );
        env.assert_clean();
    }
    // The auth realm on another host: the key signature and token never go there.
    let realm = format!("http://127.0.0.2:{other_port}/token");
    let hook: Override = Arc::new(move |_, _, _| {
        Some(
            Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header(
                    "www-authenticate",
                    format!(r#"Bearer realm="{realm}",service="evil",scope="repository:library/evil:pull""#),
                )
                .body(Body::empty())
                .unwrap(),
        )
    });
    let env = env_with(manifest.clone(), blobs.clone(), hook).await;
    let t = tempfile::tempdir().unwrap();
    let r = registry(&env.store, test_options(Some(t.path().to_owned())));
    let err = r
        .pull(&env.name, true, progress::discard())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("realm host \"127.0.0.2:"), "{err}");
    env.assert_clean();
    assert!(
        other_log.lock().unwrap().is_empty(),
        "{:?}",
        other_log.lock().unwrap()
    );
}

#[tokio::test]
async fn huge_endless_and_compressed_manifests_are_bounded() {
    // 10^6 layers: refused by size before parsing (the body is not read past the limit).
    let hex = "b".repeat(64);
    let layer = format!(r#"{{"mediaType":"m","digest":"sha256:{hex}","size":1}}"#);
    let mut huge = format!(r#"{{"schemaVersion":2,"mediaType":"x","config":{layer},"layers":["#);
    huge.push_str(&vec![layer.as_str(); 1_000_000].join(","));
    huge.push_str("]}");
    let env = env_with(huge.into_bytes(), HashMap::new(), no_hook()).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("too large"), "{err}");
    env.assert_clean();

    // Under the byte limit but too many layers.
    let mut many = format!(r#"{{"schemaVersion":2,"mediaType":"x","config":{layer},"layers":["#);
    many.push_str(&vec![layer.as_str(); 70_000].join(","));
    many.push_str("]}");
    let env = env_with(many.into_bytes(), HashMap::new(), no_hook()).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("70000 layers (limit 65536)"), "{err}");
    env.assert_clean();

    // An endless manifest body (no Content-Length).
    let hook: Override = Arc::new(|_, path, _| {
        path.contains("/manifests/").then(|| {
            let endless = futures_util::stream::repeat_with(|| {
                Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 65536]))
            });
            Response::new(Body::from_stream(endless))
        })
    });
    let env = env_with(Vec::new(), HashMap::new(), hook).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("too large"), "{err}");
    env.assert_clean();

    // A gzip bomb: never decompressed, refused outright.
    let (manifest, blobs, _) = model();
    let hook: Override = Arc::new(|_, path, _| {
        path.contains("/manifests/").then(|| {
            Response::builder()
                .header("content-encoding", "gzip")
                .body(Body::from(vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0]))
                .unwrap()
        })
    });
    let env = env_with(manifest, blobs, hook).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("Content-Encoding \"gzip\""), "{err}");
    env.assert_clean();
}

#[tokio::test]
async fn signed_token_auth_flow() {
    let (manifest, blobs, _) = model();
    let keys = tempfile::tempdir().unwrap();
    let key = auth::ensure_keypair(keys.path()).unwrap();
    let public = key.public_base64();
    let vk = key.verifying_key();
    let token_requests = Arc::new(Mutex::new(0));
    let tr = token_requests.clone();
    let port_cell: Arc<Mutex<u16>> = Arc::new(Mutex::new(0));
    let pc = port_cell.clone();
    let hook: Override = Arc::new(move |_, path, headers| {
        let port = *pc.lock().unwrap();
        if path.starts_with("/token?") {
            *tr.lock().unwrap() += 1;
            let sig = headers.get("authorization")?.to_str().ok()?.to_owned();
            let (pk, s) = sig.split_once(':')?;
            let url = format!("http://127.0.0.1:{port}{path}");
            let payload = auth::token_request_payload(&url::Url::parse(&url).unwrap());
            let s = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
            let ok = pk == public
                && path.contains("service=fake")
                && path.contains("scope=repository%3Alibrary%2Fevil%3Apull")
                && vk
                    .verify_strict(
                        payload.as_bytes(),
                        &ed25519_dalek::Signature::from_slice(&s).ok()?,
                    )
                    .is_ok();
            return Some(if ok {
                Response::new(Body::from(r#"{"token":"t0k"}"#))
            } else {
                status(StatusCode::FORBIDDEN)
            });
        }
        let authed =
            headers.get("authorization").and_then(|v| v.to_str().ok()) == Some("Bearer t0k");
        (!authed).then(|| {
            Response::builder()
                .status(StatusCode::UNAUTHORIZED)
                .header(
                    "www-authenticate",
                    format!(r#"Bearer realm="http://127.0.0.1:{port}/token",service="fake",scope="repository:library/evil:pull""#),
                )
                .body(Body::empty())
                .unwrap()
        })
    });
    let env = env_with(manifest.clone(), blobs, hook).await;
    *port_cell.lock().unwrap() = env.name.host().rsplit(':').next().unwrap().parse().unwrap();
    let r = registry(&env.store, test_options(Some(keys.path().to_owned())));
    r.pull(&env.name, true, progress::discard()).await.unwrap();
    assert_eq!(env.store.read(&env.name).unwrap().unwrap().bytes, manifest);
    assert_eq!(*token_requests.lock().unwrap(), 1, "one token, reused");

    // Without a key directory the challenge cannot be answered: a clear error.
    let r = registry(&env.store, test_options(None));
    env.store.delete(&env.name).unwrap();
    let err = r
        .pull(&env.name, true, progress::discard())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("requires authentication"), "{err}");
}

#[tokio::test]
async fn disk_full_is_a_clean_error() {
    if nix::unistd::geteuid().as_raw() != 0 {
        registry_support::prereq::missing("root, to mount a tmpfs for the disk-full test");
        return;
    }
    let (manifest, blobs, m) = model();
    let env = env_with(manifest, blobs, no_hook()).await;
    let mnt = env.parent.join("small");
    std::fs::create_dir(&mnt).unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        registry_support::prereq::missing("a tmpfs mount (mount -t tmpfs failed)");
        return;
    }
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Unmount(mnt.clone());
    let store = Store::open(mnt.join("models")).unwrap();
    let r = registry(&store, test_options(None));
    let err = r
        .pull(&env.name, true, progress::discard())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("No space left on device"), "{err}");
    assert!(store.list().unwrap().is_empty(), "no manifest");
    assert!(
        !store.blobs().exists(&m.layers[0].digest),
        "no visible blob"
    );
    for f in files(store.blobs().dir()) {
        assert!(
            Digest::from_blob_file_name(&f).is_none()
                || f.ends_with(&m.config.digest.hex().to_string()),
            "{f}"
        );
    }
}

#[tokio::test]
async fn silent_registry_times_out() {
    let (manifest, blobs, m) = model();
    // A manifest whose body never arrives.
    let hook: Override = Arc::new(|_, path, _| {
        path.contains("/manifests/").then(|| {
            Response::new(Body::from_stream(futures_util::stream::pending::<
                Result<bytes::Bytes, std::io::Error>,
            >()))
        })
    });
    let env = env_with(manifest.clone(), blobs.clone(), hook).await;
    let mut opts = test_options(None);
    opts.request_timeout = std::time::Duration::from_millis(300);
    let r = registry(&env.store, opts.clone());
    let err = r
        .pull(&env.name, true, progress::discard())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("did not send the manifest in time"),
        "{err}"
    );
    env.assert_clean();

    // A blob whose bytes stop after a few: the part is restarted (stall), retried, then fails.
    let big = m.layers[0].digest.to_string();
    let hook: Override =
        Arc::new(move |method, path, headers| {
            (method == Method::GET && path.ends_with(&big)).then(|| {
                let range = headers["range"]
                    .to_str()
                    .unwrap()
                    .trim_start_matches("bytes=")
                    .to_owned();
                let first = futures_util::stream::iter([Ok::<_, std::io::Error>(
                    bytes::Bytes::from(vec![0u8; 10]),
                )]);
                Response::builder()
                    .status(StatusCode::PARTIAL_CONTENT)
                    .header("content-range", format!("bytes {range}/{}", 3 << 20))
                    .body(Body::from_stream(
                        first.chain(futures_util::stream::pending()),
                    ))
                    .unwrap()
            })
        });
    let env = env_with(manifest, blobs, hook).await;
    opts.stall_timeout = std::time::Duration::from_millis(200);
    opts.retries = 1;
    let r = registry(&env.store, opts);
    let start = std::time::Instant::now();
    let err = r
        .pull(&env.name, true, progress::discard())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("stalled"), "{err}");
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let gets = env
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("GET") && l.contains(&m.layers[0].digest.to_string()))
        .count();
    assert!(gets >= 2, "the stalled part was restarted ({gets} GETs)");
    env.assert_clean();
}

/// A part that stalls is restarted, and the pull then completes from the honest retry; the
/// manifest request carries Ollama's Accept header.
#[tokio::test]
async fn stalled_part_is_restarted_and_the_pull_completes() {
    let (manifest, blobs, m) = model();
    let big = m.layers[0].digest.to_string();
    let data = blobs[&big].clone();
    let gets = Arc::new(Mutex::new(0));
    let accept = Arc::new(Mutex::new(Vec::new()));
    let (g, a) = (gets.clone(), accept.clone());
    let hook: Override = Arc::new(move |method, path, headers| {
        if path.contains("/manifests/") {
            a.lock().unwrap().push(
                headers
                    .get("accept")
                    .map(|v| v.to_str().unwrap().to_owned())
                    .unwrap_or_default(),
            );
            return None;
        }
        if method != Method::GET || !path.ends_with(&big) {
            return None;
        }
        let first = {
            let mut n = g.lock().unwrap();
            *n += 1;
            *n == 1
        };
        if !first {
            return Some(honest_blob(method, headers, &data));
        }
        // The first GET sends 10 bytes of its range, then nothing.
        let range = headers["range"]
            .to_str()
            .unwrap()
            .trim_start_matches("bytes=")
            .to_owned();
        let start: usize = range.split('-').next().unwrap().parse().unwrap();
        let head = bytes::Bytes::from(data[start..start + 10].to_vec());
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(head)]);
        Some(
            Response::builder()
                .status(StatusCode::PARTIAL_CONTENT)
                .header("content-range", format!("bytes {range}/{}", data.len()))
                .body(Body::from_stream(
                    first.chain(futures_util::stream::pending()),
                ))
                .unwrap(),
        )
    });
    let env = env_with(manifest.clone(), blobs, hook).await;
    let mut opts = test_options(None);
    opts.stall_timeout = std::time::Duration::from_millis(300);
    let r = registry(&env.store, opts);
    r.pull(&env.name, true, progress::discard()).await.unwrap();
    assert_eq!(env.store.read(&env.name).unwrap().unwrap().bytes, manifest);
    let stored = std::fs::read(env.store.blobs().path(&m.layers[0].digest)).unwrap();
    assert_eq!(Digest::of_bytes(&stored), m.layers[0].digest);
    let n = *gets.lock().unwrap();
    let o = test_options(None);
    let size = 3u64 << 20;
    let parts = policy::parts(size, policy::part_size(size, o.part_min, o.part_max)).len();
    assert_eq!(n, parts + 1, "one restarted part, every other part once");
    assert_eq!(
        *accept.lock().unwrap(),
        vec!["application/vnd.docker.distribution.manifest.v2+json".to_owned()]
    );
}

/// A blob reply with a Content-Encoding (a gzip bomb) is refused, never decompressed.
#[tokio::test]
async fn compressed_blob_replies_are_refused() {
    let (manifest, blobs, m) = model();
    let big = m.layers[0].digest.to_string();
    let hook: Override = Arc::new(move |method, path, _| {
        (method == Method::GET && path.ends_with(&big)).then(|| {
            Response::builder()
                .status(StatusCode::PARTIAL_CONTENT)
                .header("content-encoding", "gzip")
                .body(Body::from(vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0]))
                .unwrap()
        })
    });
    let env = env_with(manifest, blobs, hook).await;
    let err = env.pull().await.to_string();
    assert!(err.contains("Content-Encoding \"gzip\""), "{err}");
    env.assert_clean();
}
