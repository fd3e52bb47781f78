//! A fake registry (an axum server) for hostile-registry tests: serves a manifest and blobs
//! honestly unless a per-test hook answers a request first; logs every request line.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use http::{HeaderMap, Method, StatusCode};
use server::store::registry::progress;
use server::store::{Digest, Layer, Manifest, ModelName, Store};

use super::{bytes, files, registry, test_options};

pub type Override = Arc<dyn Fn(&Method, &str, &HeaderMap) -> Option<Response> + Send + Sync>;

#[derive(Clone)]
pub struct Fake {
    pub manifest: Arc<Mutex<Vec<u8>>>,
    pub blobs: Arc<HashMap<String, Vec<u8>>>,
    pub log: Arc<Mutex<Vec<String>>>,
    pub hook: Override,
}

/// A server on `ip`:random port. Returns its port and request log.
pub async fn serve(ip: &str, fake: Fake) -> u16 {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().fallback(handle).with_state(fake);
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    port
}

pub async fn handle(State(f): State<Fake>, req: Request) -> Response {
    let (method, path, headers) = (
        req.method().clone(),
        req.uri().to_string(),
        req.headers().clone(),
    );
    f.log.lock().unwrap().push(format!("{method} {path}"));
    if let Some(r) = (f.hook)(&method, &path, &headers) {
        return r;
    }
    if path.contains("/manifests/") {
        return Response::new(Body::from(f.manifest.lock().unwrap().clone()));
    }
    let digest = path.rsplit('/').next().unwrap_or("").to_owned();
    let Some(data) = f.blobs.get(&digest) else {
        return status(StatusCode::NOT_FOUND);
    };
    honest_blob(&method, &headers, data)
}

pub fn status(s: StatusCode) -> Response {
    Response::builder().status(s).body(Body::empty()).unwrap()
}

pub fn honest_blob(method: &Method, headers: &HeaderMap, data: &[u8]) -> Response {
    if method == Method::HEAD {
        return Response::builder()
            .header("content-length", data.len())
            .body(Body::empty())
            .unwrap();
    }
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some((a, b)) = range
        .strip_prefix("bytes=")
        .and_then(|r| r.split_once('-'))
        .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
    else {
        return Response::new(Body::from(data.to_vec()));
    };
    Response::builder()
        .status(StatusCode::PARTIAL_CONTENT)
        .header("content-range", format!("bytes {a}-{b}/{}", data.len()))
        .body(Body::from(data[a..=b].to_vec()))
        .unwrap()
}

/// A model with a 3 MB blob whose manifest and blobs the fake serves honestly.
pub fn model() -> (Vec<u8>, HashMap<String, Vec<u8>>, Manifest) {
    let data = bytes(3, 3 << 20);
    let cfg = br#"{"model_format":"gguf"}"#.to_vec();
    let (dd, cd) = (Digest::of_bytes(&data), Digest::of_bytes(&cfg));
    let m = Manifest::new(
        Layer::new(
            server::store::manifest::MEDIA_TYPE_CONFIG,
            cd.clone(),
            cfg.len() as u64,
        ),
        vec![Layer::new(
            server::store::manifest::MEDIA_TYPE_MODEL,
            dd.clone(),
            data.len() as u64,
        )],
    );
    let blobs = HashMap::from([(dd.to_string(), data), (cd.to_string(), cfg)]);
    (m.to_bytes(), blobs, m)
}

pub struct Env {
    pub _t: tempfile::TempDir,
    pub parent: std::path::PathBuf,
    pub store: Store,
    pub log: Arc<Mutex<Vec<String>>>,
    pub name: ModelName,
    pub before: Vec<String>,
}

pub async fn env_with(manifest: Vec<u8>, blobs: HashMap<String, Vec<u8>>, hook: Override) -> Env {
    let t = tempfile::tempdir().unwrap();
    let parent = t.path().to_owned();
    let store = Store::open(parent.join("models")).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let fake = Fake {
        manifest: Arc::new(Mutex::new(manifest)),
        blobs: Arc::new(blobs),
        log: log.clone(),
        hook,
    };
    let port = serve("127.0.0.1", fake).await;
    let name = ModelName::parse(&format!("http://127.0.0.1:{port}/library/evil:latest")).unwrap();
    let before = files(&parent);
    Env {
        _t: t,
        parent,
        store,
        log,
        name,
        before,
    }
}

pub fn no_hook() -> Override {
    Arc::new(|_, _, _| None)
}

impl Env {
    pub async fn pull(&self) -> server::error::Error {
        let r = registry(&self.store, test_options(None));
        r.pull(&self.name, true, progress::discard())
            .await
            .unwrap_err()
    }

    /// Nothing new but invisible partials and blobs whose bytes hash to their name (an honest
    /// layer served beside a hostile one) exists, and no manifest.
    pub fn assert_clean(&self) {
        let after: Vec<String> = files(&self.parent)
            .into_iter()
            .filter(|f| !self.before.contains(f))
            .collect();
        for f in &after {
            let name = f
                .strip_prefix("models/blobs/")
                .unwrap_or_else(|| panic!("unexpected file {f}"));
            if name.contains("-partial") {
                continue;
            }
            let d =
                Digest::from_blob_file_name(name).unwrap_or_else(|| panic!("unexpected file {f}"));
            let data = std::fs::read(self.parent.join(f)).unwrap();
            assert_eq!(Digest::of_bytes(&data), d, "unverified blob {f}");
        }
        assert!(self.store.list().unwrap().is_empty());
    }
}
