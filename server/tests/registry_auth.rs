//! The signed-token challenge flow against the real registry: `docker-registry` configured with
//! token auth (RS256 JWTs checked against a self-signed certificate made with `openssl`), behind
//! a front server written here that serves the realm on the registry's own host:port (the realm
//! must match the registry host) and forwards everything else. The realm only issues a token
//! when the request carries a valid ed25519 signature, in Ollama's format, from the known key.

mod registry_support;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use base64::Engine as _;
use futures_util::TryStreamExt as _;
use http::StatusCode;
use registry_support::*;
use server::store::registry::{auth, progress};
use server::store::Store;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

#[derive(Clone)]
struct Front {
    port: u16,
    upstream: u16,
    key_pem: PathBuf,
    cert_der_b64: String,
    trusted: ed25519_dalek::VerifyingKey,
    tokens: Arc<Mutex<Vec<String>>>,
    http: reqwest::Client,
}

async fn front(State(f): State<Front>, req: Request) -> Response {
    let uri = req.uri().to_string();
    if uri.starts_with("/token?") {
        return token(&f, &uri, req.headers());
    }
    let (parts, body) = req.into_parts();
    let mut rb = f.http.request(
        parts.method,
        format!("http://127.0.0.1:{}{uri}", f.upstream),
    );
    for (k, v) in &parts.headers {
        if k != http::header::HOST {
            rb = rb.header(k, v);
        }
    }
    let body = reqwest::Body::wrap_stream(body.into_data_stream().map_err(std::io::Error::other));
    let resp = rb.body(body).send().await.unwrap();
    let mut out = Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        out = out.header(k, v);
    }
    out.body(Body::from_stream(resp.bytes_stream())).unwrap()
}

/// Issues a registry JWT iff the Authorization header is our key's signature over Ollama's
/// token-request payload for exactly this URL.
fn token(f: &Front, uri: &str, headers: &http::HeaderMap) -> Response {
    let deny = || {
        Response::builder()
            .status(StatusCode::UNAUTHORIZED)
            .body(Body::empty())
            .unwrap()
    };
    let Some(sig) = headers.get("authorization").and_then(|v| v.to_str().ok()) else {
        return deny();
    };
    let url = url::Url::parse(&format!("http://127.0.0.1:{}{uri}", f.port)).unwrap();
    let payload = auth::token_request_payload(&url);
    let verified = sig.split_once(':').and_then(|(pk, s)| {
        let blob = B64.decode(pk).ok()?;
        (blob.get(19..)? == f.trusted.as_bytes()).then_some(())?;
        let s = ed25519_dalek::Signature::from_slice(&B64.decode(s).ok()?).ok()?;
        f.trusted.verify_strict(payload.as_bytes(), &s).ok()
    });
    if verified.is_none() {
        return deny();
    }
    let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
    let access: Vec<serde_json::Value> = q
        .iter()
        .filter(|(k, _)| k == "scope")
        .filter_map(|(_, s)| {
            let mut it = s.splitn(3, ':');
            let (kind, name, actions) = (it.next()?, it.next()?, it.next()?);
            Some(serde_json::json!({"type": kind, "name": name, "actions": actions.split(',').collect::<Vec<_>>()}))
        })
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = serde_json::json!({"typ": "JWT", "alg": "RS256", "x5c": [f.cert_der_b64]});
    let claims = serde_json::json!({
        "iss": "herd-test-issuer", "sub": "herd", "aud": "herd-test",
        "exp": now + 300, "nbf": now - 10, "iat": now, "jti": format!("{now}-{}", rand_id()),
        "access": access,
    });
    let input = format!(
        "{}.{}",
        B64URL.encode(header.to_string()),
        B64URL.encode(claims.to_string())
    );
    let sig = openssl(
        &["dgst", "-sha256", "-sign"],
        Some(&f.key_pem),
        input.as_bytes(),
    );
    let jwt = format!("{input}.{}", B64URL.encode(sig));
    f.tokens.lock().unwrap().push(uri.to_owned());
    Response::new(Body::from(serde_json::json!({ "token": jwt }).to_string()))
}

fn rand_id() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn openssl(args: &[&str], key: Option<&Path>, stdin: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut cmd = std::process::Command::new("openssl");
    cmd.args(args);
    if let Some(k) = key {
        cmd.arg(k);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "openssl {args:?}");
    out.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_auth_against_real_registry() {
    if !Path::new(REGISTRY_BIN).exists() || !Path::new("/usr/bin/openssl").exists() {
        registry_support::prereq::missing(format!("{REGISTRY_BIN} and openssl"));
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let (key_pem, cert_pem) = (certs.path().join("key.pem"), certs.path().join("cert.pem"));
    let ok = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=herd-test",
        ])
        .arg("-keyout")
        .arg(&key_pem)
        .arg("-out")
        .arg(&cert_pem)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let der = openssl(&["x509", "-outform", "DER", "-in"], Some(&cert_pem), b"");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let extra = format!(
        "  host: http://127.0.0.1:{port}\nauth:\n  token:\n    realm: http://127.0.0.1:{port}/token\n    service: herd-test\n    issuer: herd-test-issuer\n    rootcertbundle: {}\n",
        cert_pem.display()
    );
    let Some(reg) = RealRegistry::start_with(&extra) else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let key = auth::ensure_keypair(keys.path()).unwrap();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let state = Front {
        port,
        upstream: reg.port,
        key_pem: key_pem.clone(),
        cert_der_b64: B64.encode(der),
        trusted: key.verifying_key(),
        tokens: tokens.clone(),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
    };
    let app = axum::Router::new().fallback(front).with_state(state);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let name =
        server::store::ModelName::parse(&format!("http://127.0.0.1:{port}/library/authed:latest"))
            .unwrap();
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(t.path()).unwrap();
    let manifest = make_model(&store, &name, 21, 1_500_000);

    // Without the key the registry's 401 stands.
    let r = registry(&store, test_options(None));
    let err = r.push(&name, true, progress::discard()).await.unwrap_err();
    assert!(err.to_string().contains("requires authentication"), "{err}");
    // Another key: the realm refuses it.
    let other = tempfile::tempdir().unwrap();
    let r = registry(&store, test_options(Some(other.path().to_owned())));
    let err = r.push(&name, true, progress::discard()).await.unwrap_err();
    assert!(err.to_string().starts_with("401"), "{err}");
    assert!(tokens.lock().unwrap().is_empty());

    // The right key: push, then pull into an empty store.
    let r = registry(&store, test_options(Some(keys.path().to_owned())));
    r.push(&name, true, progress::discard()).await.unwrap();
    let pushed_tokens = tokens.lock().unwrap().len();
    assert!(pushed_tokens >= 1);
    let scopes = tokens.lock().unwrap().clone();
    assert!(
        scopes.iter().any(
            |u| u.contains("scope=repository%3Alibrary%2Fauthed%3Apull%2Cpush")
                || u.contains("scope=repository%3Alibrary%2Fauthed%3Apush%2Cpull")
        ),
        "{scopes:?}"
    );

    let t2 = tempfile::tempdir().unwrap();
    let store2 = Store::open(t2.path()).unwrap();
    let r2 = registry(&store2, test_options(Some(keys.path().to_owned())));
    r2.pull(&name, true, progress::discard()).await.unwrap();
    assert_eq!(store2.read(&name).unwrap().unwrap().bytes, manifest);
    assert!(tokens.lock().unwrap().len() > pushed_tokens);
}
