//! Test harness: spawn the built runner on a temp socket and speak HTTP/1.1 to it over the Unix
//! socket, as the server does. Runners use one thread; heavy tests take `serial()` so the shared
//! 2-core machine runs one model at a time.
#![allow(dead_code)]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use runner_protocol::{CompletionChunk, DoneReason, Health, Timings};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::net::UnixStream;

/// One model-running test at a time (an async mutex: each test has its own runtime, and a
/// panicking test must not poison the others).
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static M: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    M.lock().await
}

/// gemma-3-270m, fetched by scripts/fetch-test-models when missing.
pub fn gemma() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/fetch-test-models");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .expect("run scripts/fetch-test-models");
        assert!(
            out.status.success(),
            "fetch-test-models failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = String::from_utf8(out.stdout).unwrap();
        PathBuf::from(dir.trim()).join("gemma-3-270m-q4_k_m.gguf")
    })
    .clone()
}

/// The runner binary under test: this harness serves runner-llamacpp's tests and, included by
/// path, runner-mlx's (each crate's tests see only their own binary).
pub fn exe() -> &'static Path {
    let exe = option_env!("CARGO_BIN_EXE_runner-llamacpp")
        .or(option_env!("CARGO_BIN_EXE_runner-mlx"))
        .expect("built as an integration test of a runner crate");
    Path::new(exe)
}

pub struct Runner {
    pub child: Child,
    pub socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Runner {
    /// Start the runner with `extra` flags (after --model/--socket/--threads 1) and wait until
    /// its socket exists (not until it is ready).
    pub fn spawn(model: &Path, extra: &[&str]) -> Runner {
        Runner::spawn_exe(exe(), model, extra)
    }

    pub fn spawn_exe(exe: &Path, model: &Path, extra: &[&str]) -> Runner {
        Runner::start(exe, model, extra, None)
    }

    /// As `spawn`, with OLLAMA_DEBUG set and stderr written to `log` (the runner then reports
    /// per-request decisions there).
    pub fn spawn_logged(model: &Path, extra: &[&str], log: &Path) -> Runner {
        Runner::start(exe(), model, extra, Some(log))
    }

    fn start(exe: &Path, model: &Path, extra: &[&str], log: Option<&Path>) -> Runner {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("runner.sock");
        let mut cmd = Command::new(exe);
        cmd.arg("--model")
            .arg(model)
            .arg("--socket")
            .arg(&socket)
            .args(["--threads", "1"])
            .args(extra)
            // As the server spawns it: a stdin pipe held open for the runner's whole life.
            .stdin(Stdio::piped())
            .stdout(Stdio::null());
        match log {
            Some(log) => cmd
                .env("OLLAMA_DEBUG", "1")
                .stderr(std::fs::File::create(log).unwrap()),
            None => cmd.stderr(Stdio::inherit()),
        };
        let child = cmd.spawn().expect("spawn runner");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            assert!(Instant::now() < deadline, "runner never bound its socket");
            std::thread::sleep(Duration::from_millis(10));
        }
        Runner {
            child,
            socket,
            _dir: dir,
        }
    }

    pub async fn health(&self) -> Health {
        let (st, body) = call(&self.socket, "GET", "/health", None).await;
        assert_eq!(st, StatusCode::OK);
        serde_json::from_slice(&body).unwrap()
    }

    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match self.health().await {
                Health::Ready => return,
                Health::Failed { kind, message } => panic!("load failed: {kind}: {message}"),
                Health::Loading { .. } => {}
            }
            assert!(Instant::now() < deadline, "runner did not become ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A runner with OLLAMA_DEBUG whose stderr goes to a file, for tests that check what it
/// reports (which sampling path a request took, slot moves, grammar timings).
pub struct Logged {
    pub runner: Runner,
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Logged {
    /// Start with `extra` flags and wait until ready.
    pub async fn ready(model: &Path, extra: &[&str]) -> Logged {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stderr.log");
        let runner = Runner::spawn_logged(model, extra, &log);
        runner.wait_ready().await;
        Logged {
            runner,
            log,
            _dir: dir,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.runner.socket
    }

    /// Everything written to stderr so far.
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The runner's own lines, without their `runner-…: ` prefix (the engine's are many).
    pub fn lines(&self) -> Vec<String> {
        let name = exe().file_name().unwrap().to_string_lossy();
        let prefix = format!("{name}: ");
        self.text()
            .lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn connect(socket: &Path) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = UnixStream::connect(socket)
        .await
        .expect("connect to runner");
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

pub async fn send(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> Response<Incoming> {
    let mut s = connect(socket).await;
    let body = body
        .map(|b| serde_json::to_vec(&b).unwrap())
        .unwrap_or_default();
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "runner")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    s.send_request(req).await.expect("request")
}

pub async fn call(
    socket: &Path,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Vec<u8>) {
    let resp = send(socket, method, path, body).await;
    let st = resp.status();
    (
        st,
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
}

/// A finished completion: concatenated text and the final chunk.
#[derive(Debug, Clone)]
pub struct Completion {
    pub text: String,
    pub reason: DoneReason,
    pub timings: Timings,
    pub chunks: Vec<CompletionChunk>,
}

pub async fn complete(socket: &Path, body: Value) -> Completion {
    let (st, bytes) = call(socket, "POST", "/completion", Some(body)).await;
    assert_eq!(st, StatusCode::OK, "{}", String::from_utf8_lossy(&bytes));
    parse_stream(&bytes)
}

pub fn parse_stream(bytes: &[u8]) -> Completion {
    let mut text = String::new();
    let mut done = None;
    let mut chunks = Vec::new();
    for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let c: CompletionChunk = serde_json::from_slice(line).unwrap();
        match &c {
            CompletionChunk::Token { content, .. } => {
                assert!(done.is_none(), "token after done");
                text.push_str(content)
            }
            CompletionChunk::Done {
                done_reason,
                timings,
            } => done = Some((*done_reason, timings.clone())),
            CompletionChunk::Error { error } => panic!("stream error: {error}"),
            // Prefill heartbeats: checked by their own test, not part of the output.
            CompletionChunk::Progress { .. } => {
                assert!(done.is_none(), "progress after done");
                continue;
            }
        }
        chunks.push(c);
    }
    let (reason, timings) = done.expect("stream ended without a done chunk");
    Completion {
        text,
        reason,
        timings,
        chunks,
    }
}

/// A greedy request with a small budget.
pub fn greedy(prompt: &str, n: i32) -> Value {
    json!({"prompt": prompt, "num_predict": n, "sampling": {"temperature": 0.0}})
}

/// The sampler of the GPU benchmark, seeded.
pub fn sampled(prompt: &str, n: i32, seed: i64) -> Value {
    json!({
        "prompt": prompt,
        "num_predict": n,
        "sampling": {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05, "seed": seed},
    })
}

/// SmolLM2's chat format around one user turn, the assistant's turn open.
pub fn chatml(user: &str) -> String {
    format!("<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")
}

/// Every chunk of `c` except Done's timings (those differ by duration and draft counts): what
/// must not change with drafting.
pub fn output_chunks(c: &Completion) -> Vec<Value> {
    c.chunks
        .iter()
        .filter(|c| !matches!(c, CompletionChunk::Done { .. }))
        .map(|c| serde_json::to_value(c).unwrap())
        .collect()
}

/// Runner flags for the concurrent drafting tests: three slots drafting 4-token n-gram
/// continuations whole (`--draft-cost 0`, so the amount drafted does not follow machine load).
pub const CONCURRENT_DRAFTING: &[&str] = &[
    "--ctx-size",
    "512",
    "--parallel",
    "3",
    "--draft-ngram",
    "4",
    "--draft-cost",
    "0",
];

/// Each of `reqs` alone on `socket` (`cache_prompt` off), then all at once: each concurrent
/// run's text must be its solo run's. Returns the concurrent runs.
pub async fn concurrent_equal_solo(socket: &Path, reqs: &[Value]) -> Vec<Completion> {
    let reqs: Vec<Value> = reqs
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r["cache_prompt"] = json!(false);
            r
        })
        .collect();
    let mut solo = Vec::new();
    for req in &reqs {
        solo.push(complete(socket, req.clone()).await.text);
    }
    let handles: Vec<_> = reqs
        .iter()
        .map(|req| {
            let (socket, req) = (socket.to_path_buf(), req.clone());
            tokio::spawn(async move { complete(&socket, req).await })
        })
        .collect();
    let mut out = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        let c = h.await.unwrap();
        assert_eq!(c.text, solo[i], "request {i} beside the others");
        out.push(c);
    }
    out
}

/// Start a long greedy generation on `r` (whose only slot it takes), read a few chunks, close
/// the connection, and check that the next request gets the slot at once.
pub async fn closing_frees_the_slot(r: &Runner, prompt: &str) {
    use http_body_util::BodyExt;
    // A long generation: thousands of tokens would take minutes on one thread.
    let long = json!({"prompt": prompt, "num_predict": 5000,
                      "sampling": {"temperature": 0.0}, "shift": true});
    let resp = send(&r.socket, "POST", "/completion", Some(long)).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut got = 0;
    while got < 3 {
        let frame = body.frame().await.expect("stream ended early").unwrap();
        got += usize::from(frame.is_data());
    }
    drop(body); // closes the connection

    let started = Instant::now();
    let next = complete(&r.socket, greedy("Hello", 2)).await;
    assert_eq!(next.timings.eval_count, 2);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the cancelled request still held the only slot ({:?})",
        started.elapsed()
    );
}

/// SIGTERM while `prompt` generates: its stream ends with `Cancelled`, the runner exits 0 by
/// itself within 3 s (its stdin pipe still open, as under the server) and removes its socket.
pub async fn sigterm_drains(r: &mut Runner, prompt: &str) {
    use http_body_util::BodyExt;
    let resp = send(&r.socket, "POST", "/completion", Some(greedy(prompt, 2000))).await;
    let mut body = resp.into_body();
    body.frame().await.unwrap().unwrap();
    let killed = Command::new("kill")
        .args(["-TERM", &r.child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let rest = body
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let tail = String::from_utf8_lossy(&rest);
    assert!(
        tail.contains(r#""kind":"Cancelled""#),
        "stream ends with Cancelled: {tail}"
    );
    // By itself and soon: the server SIGKILLs a runner still alive after its grace (5 s).
    let deadline = Instant::now() + Duration::from_secs(3);
    let status = loop {
        if let Some(s) = r.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "runner still alive 3 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    assert!(!r.socket.exists(), "socket removed on exit");
}
