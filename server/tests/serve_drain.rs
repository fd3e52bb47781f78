//! The real `herd serve` with the real runner on SmolLM2, locked with an API key: the startup
//! log shows the effective config without the key; /healthz and /readyz answer without a key;
//! on SIGTERM the server drains — /readyz and new requests answer 503 while a stream already in
//! flight runs to its end — then exits 0 with no runner left.
//!
//! Needs `cargo build --workspace --bins` and `scripts/fetch-test-models`; a missing
//! prerequisite fails the test unless HERD_ALLOW_SKIP=1.

mod herd_proc;
mod serve_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use herd_proc::{listen, Listening, HERD};
use serde_json::{json, Value};
use serve_support::api_support::TestStore;
use serve_support::{native_runner, register_file, test_model};

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const KEY: &str = "sk-drain-test-7f3a9c";

fn prerequisite(what: Option<std::path::PathBuf>, why: &str) -> Option<std::path::PathBuf> {
    if what.is_none() {
        assert!(
            std::env::var("HERD_ALLOW_SKIP").as_deref() == Ok("1"),
            "missing prerequisite: {why}"
        );
        eprintln!("skipped (HERD_ALLOW_SKIP=1): {why}");
    }
    what
}

fn processes_mentioning(needle: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_streams_and_refuses_new_work() {
    let Some(runner) = prerequisite(native_runner(), "runner-llamacpp not built") else {
        return;
    };
    let Some(model) = prerequisite(
        test_model(SMOL),
        "SmolLM2 missing (scripts/fetch-test-models)",
    ) else {
        return;
    };
    let ts = TestStore::new();
    register_file(&ts, "smol", &model, &[]);
    let home = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(HERD);
    cmd.arg("serve")
        .env("HOME", home.path())
        .env("OLLAMA_HOST", "127.0.0.1:0")
        .env("OLLAMA_MODELS", ts.root())
        .env("HERD_RUNNER", &runner)
        .env("HERD_API_KEYS", format!("other-key,{KEY}"))
        .env("HERD_SHUTDOWN_GRACE", "60s")
        .env_remove("HERD_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let Listening {
        mut child,
        addr,
        log,
    } = listen(&mut cmd, Duration::from_secs(30), None);
    let base = format!("http://{addr}");
    {
        let lines = log.lock().unwrap();
        let config = lines
            .iter()
            .find(|l| l.contains("server config:"))
            .expect("config line");
        assert!(config.contains("HERD_SHUTDOWN_GRACE:60s"), "{config}");
        assert!(config.contains("OLLAMA_MODELS:"), "{config}");
        assert!(
            !lines
                .iter()
                .any(|l| l.contains(KEY) || l.contains("other-key")),
            "key logged"
        );
    }
    let http = reqwest::Client::new();
    let auth = format!("Bearer {KEY}");
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{base}/readyz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{base}/api/tags"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    // Load the model first, so the stream below is all generation.
    let opts = json!({"temperature": 0, "seed": 1, "num_thread": 1});
    let warm = http
        .post(format!("{base}/api/generate"))
        .header("authorization", &auth)
        .json(&json!({"model": "smol", "prompt": "Hi", "stream": false,
                      "options": {"num_predict": 1, "num_thread": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), 200, "{}", warm.text().await.unwrap());
    let blobs = ts.root().join("blobs").display().to_string();
    assert_eq!(processes_mentioning(&blobs).len(), 1, "one runner loaded");

    let mut o = opts.clone();
    o["num_predict"] = json!(160);
    let resp = http
        .post(format!("{base}/api/generate"))
        .header("authorization", &auth)
        .json(
            &json!({"model": "smol", "prompt": "Write a long story about a dragon.",
                      "stream": true, "options": o}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    buf.extend_from_slice(&body.next().await.expect("first chunk").unwrap());

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    // Draining: not ready, and new work is refused with 503 in each API's shape.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = http.get(format!("{base}/readyz")).send().await.unwrap();
        if r.status() == 503 {
            let v: Value = r.json().await.unwrap();
            assert_eq!(v["error"], "not ready: draining");
            break;
        }
        assert!(Instant::now() < deadline, "readyz never turned 503");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = http
        .post(format!("{base}/api/generate"))
        .header("authorization", &auth)
        .json(&json!({"model": "smol", "prompt": "x", "stream": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"error": "server is shutting down"})
    );
    let r = http
        .post(format!("{base}/v1/chat/completions"))
        .header("authorization", &auth)
        .json(&json!({"model": "smol", "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["message"], "server is shutting down");
    assert_eq!(
        http.get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // The stream admitted before SIGTERM runs to its end.
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk.expect("stream cut during drain"));
    }
    let lines: Vec<Value> = buf
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["done"], true, "{last}");
    assert!(last.get("error").is_none(), "{last}");
    assert!(last["eval_count"].as_u64().unwrap() > 1, "{last}");

    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !processes_mentioning(&blobs).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(processes_mentioning(&blobs).is_empty(), "a runner survived");
}
