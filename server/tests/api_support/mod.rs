//! Shared fixtures for the API tests: an Ollama-layout store written byte-by-byte the way Ollama
//! writes it (so the tests check compatibility, not our own writer), helpers to call the app
//! with `oneshot`, and a directory snapshot to prove that rejected requests changed nothing.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use server::api::{app, AppState};
use server::gguf::GgufBuilder;
use server::store::Store;
use sha2::{Digest as _, Sha256};
use tower::ServiceExt;

pub const MT_MODEL: &str = "application/vnd.ollama.image.model";
pub const MT_TEMPLATE: &str = "application/vnd.ollama.image.template";
pub const MT_SYSTEM: &str = "application/vnd.ollama.image.system";
pub const MT_PARAMS: &str = "application/vnd.ollama.image.params";
pub const MT_LICENSE: &str = "application/vnd.ollama.image.license";

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A temp models directory laid out like `~/.ollama/models`, one level inside a private temp
/// directory so a snapshot of that directory also catches writes next to the store.
pub struct TestStore {
    pub dir: tempfile::TempDir,
    root: PathBuf,
}

/// What a written model looks like from the outside.
pub struct WrittenModel {
    pub manifest_digest: String,
    pub size: u64,
    pub model_blob: String,
}

impl TestStore {
    pub fn new() -> TestStore {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("models");
        std::fs::create_dir_all(root.join("blobs")).unwrap();
        std::fs::create_dir_all(root.join("manifests")).unwrap();
        TestStore { dir, root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn store(&self) -> Store {
        Store::open(self.root()).unwrap()
    }

    pub fn app(&self) -> Router {
        app(AppState::new(self.store()))
    }

    /// Writes `blobs/sha256-<hex>` and returns the digest (`sha256:<hex>`).
    pub fn blob(&self, bytes: &[u8]) -> String {
        let hex = sha256_hex(bytes);
        std::fs::write(
            self.root().join("blobs").join(format!("sha256-{hex}")),
            bytes,
        )
        .unwrap();
        format!("sha256:{hex}")
    }

    pub fn manifest_path(&self, model: &str, tag: &str) -> PathBuf {
        self.root()
            .join("manifests/registry.ollama.ai/library")
            .join(model)
            .join(tag)
    }

    /// `NAME:latest`: a fake-runner model that echoes its chat prompt, each message rendered as
    /// `[role:content]` (the REPL tests read back what a turn sent).
    pub fn echo_chat_model(&self, name: &str) -> WrittenModel {
        self.model(
            name,
            "latest",
            b"#fake-runner\n--echo\n",
            &[(
                MT_TEMPLATE,
                b"{{ range .Messages }}[{{ .Role }}:{{ .Content }}]{{ end }}",
            )],
            ago(60),
        )
    }

    /// A model as Ollama's `create` writes it: config blob, GGUF model layer, extra layers, and
    /// the manifest JSON in Ollama's field order, with the given mtime.
    pub fn model(
        &self,
        model: &str,
        tag: &str,
        gguf: &[u8],
        extra: &[(&str, &[u8])],
        modified: SystemTime,
    ) -> WrittenModel {
        let model_digest = self.blob(gguf);
        let mut layers = vec![(MT_MODEL.to_string(), model_digest.clone(), gguf.len())];
        for (mt, bytes) in extra {
            layers.push((mt.to_string(), self.blob(bytes), bytes.len()));
        }
        let diff_ids: Vec<&str> = layers.iter().map(|l| l.1.as_str()).collect();
        let config = serde_json::to_vec(&serde_json::json!({
            "model_format": "gguf",
            "model_family": "llama",
            "model_families": ["llama"],
            "model_type": "24",
            "file_type": "F32",
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": diff_ids}
        }))
        .unwrap();
        let config_digest = self.blob(&config);
        let layer_json: Vec<String> = layers
            .iter()
            .map(|(mt, d, n)| format!(r#"{{"mediaType":"{mt}","digest":"{d}","size":{n}}}"#))
            .collect();
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{config_digest}","size":{}}},"layers":[{}]}}"#,
            config.len(),
            layer_json.join(",")
        );
        let path = self.manifest_path(model, tag);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &manifest).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(modified)
            .unwrap();
        let size = config.len() + layers.iter().map(|l| l.2).sum::<usize>();
        WrittenModel {
            manifest_digest: sha256_hex(manifest.as_bytes()),
            size: size as u64,
            model_blob: model_digest,
        }
    }

    /// Every file under the temp directory (the store and its parent) with its bytes' hash:
    /// equal snapshots = nothing changed.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<String, String>) {
            for e in std::fs::read_dir(dir).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                let rel = p.strip_prefix(root).unwrap().display().to_string();
                if e.file_type().unwrap().is_dir() {
                    out.insert(format!("{rel}/"), String::new());
                    walk(&p, root, out);
                } else {
                    out.insert(rel, sha256_hex(&std::fs::read(&p).unwrap()));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(self.dir.path(), self.dir.path(), &mut out);
        out
    }
}

pub fn tiny_gguf() -> Vec<u8> {
    GgufBuilder::tiny_llama().build().unwrap()
}

/// A fixed, whole-second time `secs_ago` before now.
pub fn ago(secs_ago: u64) -> SystemTime {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    SystemTime::UNIX_EPOCH + Duration::from_secs(now - secs_ago)
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text()))
    }
}

pub async fn send(app: &Router, req: Request<Body>) -> Reply {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

pub fn request(method: Method, uri: &str, body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("host", "localhost:11434")
        .body(body.into())
        .unwrap()
}

pub async fn post_json(app: &Router, uri: &str, body: serde_json::Value) -> Reply {
    send(app, request(Method::POST, uri, body.to_string())).await
}

pub async fn get(app: &Router, uri: &str) -> Reply {
    send(app, request(Method::GET, uri, Body::empty())).await
}
