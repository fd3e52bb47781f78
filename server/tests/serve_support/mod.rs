//! Harness for the serving tests: an Ollama-layout temp store whose "models" are fake-runner
//! scripts (or real GGUFs), the production app (`server::api::app`) with a real scheduler and
//! engine, and helpers to read NDJSON bodies chunk by chunk.
#![allow(dead_code)]

#[path = "../api_support/mod.rs"]
pub mod api_support;
#[path = "../prereq/mod.rs"]
pub mod prereq;
#[path = "../scheduler_support/mod.rs"]
pub mod scheduler_support;

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use server::api::{app, AppState};
use server::engine::{Engine, Settings};
use server::scheduler::{Scheduler, SchedulerConfig};
use tower::ServiceExt;

#[allow(unused_imports)]
pub use api_support::{
    ago, get, post_json, request, Reply, TestStore, MT_PARAMS, MT_SYSTEM, MT_TEMPLATE,
};

pub const MT_MESSAGES: &str = "application/vnd.ollama.image.messages";
pub const MT_DRAFT: &str = "application/vnd.ollama.image.draft";

pub struct Harness {
    pub ts: TestStore,
    pub app: Router,
    pub engine: Engine,
    pub runner_dir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Harness {
        Harness::with(|_| {}, Settings::default())
    }

    /// Uses `runner` as the runner binary (the fake runner when `None`).
    pub fn with(tweak: impl FnOnce(&mut SchedulerConfig), settings: Settings) -> Harness {
        Harness::with_runner(scheduler_support::fake_runner(), tweak, settings)
    }

    pub fn with_runner(
        runner: std::path::PathBuf,
        tweak: impl FnOnce(&mut SchedulerConfig),
        settings: Settings,
    ) -> Harness {
        let ts = TestStore::new();
        let dir = server::runner::create_runner_dir().unwrap();
        let mut cfg = SchedulerConfig::new(runner, dir.path());
        cfg.stop_grace = Duration::from_secs(2);
        cfg.load_timeout = Some(Duration::from_secs(60));
        tweak(&mut cfg);
        let engine = Engine::new(Scheduler::new(cfg), settings);
        let app = app(AppState::new(ts.store()).with_engine(engine.clone()));
        Harness {
            ts,
            app,
            engine,
            runner_dir: dir,
        }
    }

    /// Registers `name:latest` whose model layer is a fake-runner script with `args`.
    pub fn fake(&self, name: &str, args: &[&str], extra: &[(&str, &[u8])]) {
        let mut text = String::from("#fake-runner\n");
        for a in args {
            text.push_str(a);
            text.push('\n');
        }
        self.ts
            .model(name, "latest", text.as_bytes(), extra, ago(60));
    }

    /// Sets fields of `name:latest`'s config blob (`model_family`, `renderer`, …), as a model
    /// created from a real GGUF or pulled from ollama.com carries them.
    pub fn set_config(&self, name: &str, fields: serde_json::Value) {
        let path = self.ts.manifest_path(name, "latest");
        let read = |p: &std::path::Path| -> serde_json::Value {
            serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
        };
        let mut manifest = read(&path);
        let digest = manifest["config"]["digest"]
            .as_str()
            .unwrap()
            .replace(':', "-");
        let mut config = read(&self.ts.root().join("blobs").join(digest));
        for (k, v) in fields.as_object().expect("an object of fields") {
            config[k] = v.clone();
        }
        let bytes = serde_json::to_vec(&config).unwrap();
        manifest["config"]["digest"] = serde_json::json!(self.ts.blob(&bytes));
        manifest["config"]["size"] = serde_json::json!(bytes.len());
        std::fs::write(&path, serde_json::to_vec(&manifest).unwrap()).unwrap();
    }

    pub async fn post(&self, uri: &str, body: serde_json::Value) -> Reply {
        post_json(&self.app, uri, body).await
    }

    /// Starts a request and returns the response with its body still streaming.
    pub async fn open(&self, uri: &str, body: serde_json::Value) -> axum::response::Response {
        self.app
            .clone()
            .oneshot(request(Method::POST, uri, Body::from(body.to_string())))
            .await
            .unwrap()
    }

    pub async fn ps(&self) -> Vec<serde_json::Value> {
        let r = get(&self.app, "/api/ps").await;
        assert_eq!(r.status, StatusCode::OK);
        r.json()["models"].as_array().unwrap().clone()
    }

    /// The pid of the one loaded runner.
    pub async fn runner_pid(&self) -> u32 {
        let ps = self.engine.scheduler().ps().await;
        assert_eq!(ps.len(), 1, "one runner loaded");
        ps[0].pid
    }
}

/// NDJSON body → parsed lines.
pub fn lines(r: &Reply) -> Vec<serde_json::Value> {
    r.text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

/// Reads body frames until at least one full line is available; returns the lines read.
pub async fn next_lines(body: &mut Body, buf: &mut String) -> Option<Vec<String>> {
    loop {
        if let Some(i) = buf.rfind('\n') {
            let rest = buf.split_off(i + 1);
            let done: Vec<String> = buf.lines().map(str::to_owned).collect();
            *buf = rest;
            return Some(done);
        }
        let frame = body.frame().await?.ok()?;
        if let Ok(data) = frame.into_data() {
            buf.push_str(&String::from_utf8_lossy(&data));
        }
    }
}

/// Parses an RFC 3339 timestamp and checks it is UTC (`Z`).
pub fn rfc3339(s: &str) -> time::OffsetDateTime {
    assert!(s.ends_with('Z'), "UTC timestamp: {s}");
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// The real runner built next to the test executable (`cargo build -p runner-llamacpp`), or
/// `HERD_RUNNER`. `None` when it has not been built: the native tests then say so and skip.
pub fn native_runner() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("HERD_RUNNER") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("runner-llamacpp");
    if !p.exists() {
        prereq::missing("runner-llamacpp not built (cargo build -p runner-llamacpp)");
    }
    p.exists().then_some(p)
}

/// A test model GGUF from `scripts/fetch-test-models` (`$HERD_CACHE/models`).
pub fn test_model(file: &str) -> Option<std::path::PathBuf> {
    let cache = std::env::var_os("HERD_CACHE").map_or_else(
        || {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/herd")
        },
        std::path::PathBuf::from,
    );
    let p = cache.join("models").join(file);
    if !p.exists() {
        prereq::missing(format!("{} (scripts/fetch-test-models)", p.display()));
    }
    p.exists().then_some(p)
}

/// Registers `name:latest` with `gguf` as its model layer the way Ollama lays it out: the blob
/// (hard-linked, else copied) under its sha256, a config blob, extra layers, the manifest.
/// A harness on the real runner with SmolLM2 registered as `smol` (plus `extra` layers), or
/// None when a prerequisite is missing (`prereq::missing` reports it).
pub fn smol_harness(extra: &[(&str, &[u8])]) -> Option<Harness> {
    let (runner, path) = (
        native_runner()?,
        test_model("SmolLM2-135M-Instruct.Q4_1.gguf")?,
    );
    let h = Harness::with_runner(
        runner,
        |c| c.load_timeout = Some(std::time::Duration::from_secs(120)),
        Default::default(),
    );
    register_file(&h.ts, "smol", &path, extra);
    Some(h)
}

pub fn register_file(ts: &TestStore, name: &str, gguf: &std::path::Path, extra: &[(&str, &[u8])]) {
    let out = std::process::Command::new("sha256sum")
        .arg(gguf)
        .output()
        .unwrap();
    let hex = String::from_utf8(out.stdout).unwrap()[..64].to_owned();
    let blob = ts.root().join("blobs").join(format!("sha256-{hex}"));
    if !blob.exists() && std::fs::hard_link(gguf, &blob).is_err() {
        std::fs::copy(gguf, &blob).unwrap();
    }
    let size = std::fs::metadata(gguf).unwrap().len();
    let mut layers = vec![format!(
        r#"{{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:{hex}","size":{size}}}"#
    )];
    for (mt, bytes) in extra {
        let d = ts.blob(bytes);
        layers.push(format!(
            r#"{{"mediaType":"{mt}","digest":"{d}","size":{}}}"#,
            bytes.len()
        ));
    }
    // Ollama's create fills the config from the GGUF: family = architecture.
    let meta = server::gguf::read_path(gguf, Default::default()).unwrap();
    let family = meta.architecture().unwrap_or_default().to_owned();
    let config = format!(
        r#"{{"model_format":"gguf","model_family":"{family}","model_families":["{family}"],"architecture":"amd64","os":"linux","rootfs":{{"type":"layers","diff_ids":["sha256:{hex}"]}}}}"#
    );
    let cd = ts.blob(config.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json","config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{cd}","size":{}}},"layers":[{}]}}"#,
        config.len(),
        layers.join(",")
    );
    let path = ts.manifest_path(name, "latest");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, manifest).unwrap();
}
