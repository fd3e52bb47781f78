//! `scripts/quickstart` (issue 14, item 10): a newcomer's first model without a registry. With a
//! temp HOME and store and a free OLLAMA_HOST port, it fetches (here: finds cached) SmolLM2,
//! starts `herd serve` in the background, creates `smollm2:135m` and answers a prompt through
//! `herd run` with the real runner. The server it started is stopped here through its pid file.

mod serve_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const HERD: &str = env!("CARGO_BIN_EXE_herd");

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the started server even when an assertion fails.
struct Stop(PathBuf);

impl Drop for Stop {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").arg(pid.trim()).status();
        }
    }
}

#[test]
fn quickstart_creates_and_runs_smollm2() {
    let real_home = PathBuf::from(std::env::var_os("HOME").unwrap_or_default());
    let cache = std::env::var_os("HERD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| real_home.join(".cache/herd"));
    let herd = std::env::var_os("HERD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(HERD));
    let runner = herd.parent().unwrap().join("runner-llamacpp");
    let gguf = cache.join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !runner.exists() || !gguf.exists() {
        serve_support::prereq::missing(format!("{} and {}", runner.display(), gguf.display()));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let home = tempfile::tempdir().unwrap();
    let pidfile = home.path().join(".ollama/herd-serve.pid");
    let _stop = Stop(pidfile.clone());
    let host = format!("127.0.0.1:{}", free_port());
    let out = Command::new(root.join("scripts/quickstart"))
        .arg("Say hi")
        .env("HOME", home.path())
        .env("HERD_CACHE", &cache)
        .env("HERD_BIN", &herd)
        .env("OLLAMA_HOST", &host)
        .env("OLLAMA_MODELS", home.path().join("models"))
        // A sampled greeting from SmolLM2 runs on indefinitely now and then: bound it.
        .env("HERD_QUICKSTART_MODELFILE", "PARAMETER num_predict 64")
        .env_remove("HERD_LOG_FORMAT")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "an answer: {stderr}");
    assert!(stderr.contains("started herd serve (pid "), "{stderr}");
    assert!(stderr.contains("herd-serve.log"), "{stderr}");
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    let pid = pid.trim();
    assert!(Path::new(&format!("/proc/{pid}")).exists(), "server runs");
    // The model is in the temp store under its name.
    let list = Command::new(&herd)
        .arg("list")
        .env("OLLAMA_HOST", &host)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&list.stdout).contains("smollm2:135m"));
    // With the Modelfile lines the test gave it.
    let params = Command::new(&herd)
        .args(["show", "smollm2:135m", "--parameters"])
        .env("OLLAMA_HOST", &host)
        .output()
        .unwrap();
    let params = String::from_utf8_lossy(&params.stdout);
    assert!(params.contains("num_predict"), "{params}");
    drop(_stop);
    for _ in 0..100 {
        let gone = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |s| s.contains(") Z "));
        if gone {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("herd serve {pid} still runs after kill");
}
