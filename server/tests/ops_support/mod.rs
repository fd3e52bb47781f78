//! Shared by the operations tests (archive, deploy): start a `herd serve` binary on a scratch
//! port and learn its address from the startup log; GET a JSON endpoint.
#![allow(dead_code)]

#[path = "../herd_proc/mod.rs"]
mod herd_proc;
use herd_proc::{listen, Listening};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `herd serve`, killed when dropped.
pub struct Served {
    pub child: Child,
    pub base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `herd serve` with `env` on 127.0.0.1:0 (no HERD_RUNNER: it uses the runner beside
/// itself) and waits for its "Listening on" line.
pub fn serve(herd: &Path, env: &[(&str, &Path)]) -> Served {
    let mut cmd = Command::new(herd);
    cmd.arg("serve")
        .env("OLLAMA_HOST", "127.0.0.1:0")
        .env_remove("HERD_RUNNER")
        .env_remove("HERD_RUNNER_DIR")
        .env_remove("HERD_API_KEYS")
        .env_remove("HERD_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let Listening { child, addr, .. } = listen(&mut cmd, Duration::from_secs(60), Some("[herd] "));
    Served {
        child,
        base: format!("http://{addr}"),
    }
}

/// GET `url`: status and body as JSON (Null when not JSON).
pub fn get(url: &str) -> (u16, serde_json::Value) {
    let out = Command::new("curl")
        .args(["-s", "-m", "10", "-w", "\n%{http_code}", url])
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(serde_json::Value::Null),
    )
}
