//! A real `herd serve` (the built binary) over a temp store and HOME, with the real runner
//! (`HERD_RUNNER`, built next to the tests), for the create/quantize end-to-end tests; plus the
//! runner lookup and a tiny HTTP helper. Skips (returns `None`) when the runner is not built.
#![allow(dead_code)]

#[path = "../herd_proc/mod.rs"]
mod herd_proc;
#[path = "../prereq/mod.rs"]
pub mod prereq;
use herd_proc::{listen, Listening};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const HERD: &str = env!("CARGO_BIN_EXE_herd");

/// The real runner built next to the test executable, or `HERD_RUNNER`.
pub fn native_runner() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HERD_RUNNER") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("runner-llamacpp");
    if p.exists() {
        Some(p)
    } else {
        prereq::missing("runner-llamacpp not built (cargo build -p runner-llamacpp)");
        None
    }
}

/// A test model from `scripts/fetch-test-models` (`~/.cache/herd/models`).
pub fn test_model(file: &str) -> Option<PathBuf> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let p = home.join(".cache/herd/models").join(file);
    if p.exists() {
        Some(p)
    } else {
        prereq::missing(format!("{} (scripts/fetch-test-models)", p.display()));
        None
    }
}

pub struct Serve {
    child: Child,
    pub base: String,
    addr: String,
    pub home: tempfile::TempDir,
    pub models: PathBuf,
    /// Every stderr line the server (and the runner output it forwards) wrote so far.
    pub log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Serve {
    /// `herd serve` on a random port over a fresh store, with `env` added.
    pub fn start(runner: &Path, env: &[(&str, &str)]) -> Serve {
        let home = tempfile::tempdir().unwrap();
        let models = home.path().join("models");
        let mut cmd = Command::new(HERD);
        cmd.arg("serve")
            .env("HOME", home.path())
            .env("OLLAMA_HOST", "127.0.0.1:0")
            .env("OLLAMA_MODELS", &models)
            .env("HERD_RUNNER", runner)
            .env("OLLAMA_NUM_PARALLEL", "1")
            .env_remove("HERD_LOG_FORMAT")
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let Listening { child, addr, log } = listen(&mut cmd, Duration::from_secs(60), None);
        Serve {
            child,
            base: format!("http://{addr}"),
            addr,
            home,
            models,
            log,
        }
    }

    /// Runs a herd client command against this server: (success, stdout, stderr).
    /// The `herd serve` process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn herd(&self, args: &[&str], cwd: &Path) -> (bool, String, String) {
        let out = Command::new(HERD)
            .args(args)
            .current_dir(cwd)
            .env("OLLAMA_HOST", &self.addr)
            .env("HOME", self.home.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Entries of the blobs directory that are not finished blobs (temp or partial files).
    pub fn stray_blob_files(&self) -> Vec<String> {
        std::fs::read_dir(self.models.join("blobs"))
            .map(|d| {
                d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .filter(|n| !(n.starts_with("sha256-") && n.len() == 71))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub async fn post(&self, path: &str, body: serde_json::Value) -> (u16, String) {
        let r = reqwest::Client::new()
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}

/// NDJSON body → values.
pub fn ndjson(body: &str) -> Vec<serde_json::Value> {
    body.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect()
}
