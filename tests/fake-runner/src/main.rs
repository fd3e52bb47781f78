//! fake-runner: a test double for herd's runner processes. It serves the real runner protocol
//! (`runner-protocol`) over HTTP/1.1 on the Unix socket given by `--socket` (bound 0600), with
//! scripted tokens and faults (see `script.rs` for the flags). Behaviour that the supervisor and
//! scheduler rely on, and that this binary therefore reproduces faithfully:
//! - `/health` reports `loading{progress}` (non-decreasing) until ready, or `failed{kind}`;
//! - `/completion` streams NDJSON `token` chunks then one `done` chunk; `num_predict`, `stop`
//!   strings and `logprobs`/`top_logprobs` (made-up values) are honoured;
//!   each request holds one of `--parallel` slots, freed as soon as the client disconnects;
//! - `/tokenize` is one token per byte (id = byte + 3; BOS = 1, EOS = 2), `/detokenize` inverts it;
//! - `/embed` returns deterministic vectors derived from each input's bytes;
//! - EOF on a piped stdin means the server died: exit (the supervisor holds the pipe open).
//! - `fake-runner devices` prints the GPUs scripted by `HERD_RUNNER_FAKE_GPUS` (`gpus.rs`), as
//!   `runner-llamacpp devices` does for the server's startup; without it, it fails.
//!
//! With `--request-log PATH`, every `/completion` appends two JSON lines to PATH:
//! `{"seq": N, "event": "request", "request": <the CompletionRequest as received>}` when it
//! arrives, then `{"seq": N, "event": "done"|"cancelled", "tokens": K}` when it ends (`cancelled`
//! = the client went away after K tokens). `seq` counts requests from 0.

mod gpus;
mod script;
mod vocab;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Frame, Incoming};
use runner_protocol::{
    CompletionChunk, CompletionRequest, DetokenizeRequest, DetokenizeResponse, DoneReason,
    EmbedRequest, ErrorBody, ErrorKind, Health, Info, Prompt, RunnerError, Timings, TokenLogprob,
    TokenizeRequest, TokenizeResponse, TopLogprob,
};
use script::Script;
use std::convert::Infallible;
use std::os::unix::fs::PermissionsExt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::net::UnixListener;
use tokio::sync::{mpsc, Semaphore};
use vocab::{detokenize, embed, prompt_len, tokenize, EOS, N_VOCAB};

struct State {
    script: Script,
    health: Mutex<Health>,
    slots: Arc<Semaphore>,
    /// Tokens emitted over the process's life, for `--crash-after`.
    emitted: AtomicU32,
    /// Completion requests received, for the request log's `seq`.
    requests: AtomicU32,
    /// Set by `--wedge-after` / `--break-after`: the engine makes no more progress.
    wedged: AtomicBool,
    model_size: u64,
}

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn main() -> std::process::ExitCode {
    let gpus = match gpus::from_env() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("fake-runner: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    // `devices` (the server's startup discovery) answers only when GPUs are scripted; otherwise
    // it fails as a runner without the subcommand does, and the server knows no devices.
    if let (Some(free), Some("devices")) = (&gpus, std::env::args().nth(1).as_deref()) {
        let list = gpus::report(Some(free), 0, 0, None);
        println!("{}", serde_json::to_string(&list).expect("serializable"));
        return std::process::ExitCode::SUCCESS;
    }
    let script = match Script::parse(std::env::args().skip(1)) {
        Ok(s) => Script { gpus, ..s },
        Err(e) => {
            eprintln!("fake-runner: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(script)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fake-runner: {e}");
            std::process::ExitCode::from(1)
        }
    }
}

async fn run(script: Script) -> std::io::Result<()> {
    let _ = std::fs::remove_file(&script.socket);
    let listener = UnixListener::bind(&script.socket)?;
    std::fs::set_permissions(&script.socket, std::fs::Permissions::from_mode(0o600))?;
    println!(
        "fake-runner: listening on {} (model {})",
        script.socket.display(),
        script.model.display()
    );
    let model_size = std::fs::metadata(&script.model).map_or(0, |m| m.len());
    let state = Arc::new(State {
        health: Mutex::new(Health::Loading { progress: 0.0 }),
        slots: Arc::new(Semaphore::new(script.parallel as usize)),
        emitted: AtomicU32::new(0),
        requests: AtomicU32::new(0),
        wedged: AtomicBool::new(false),
        model_size,
        script,
    });
    tokio::spawn(load(state.clone()));
    tokio::spawn(on_sigterm(state.clone()));
    tokio::spawn(exit_when_parent_goes(state.clone()));
    loop {
        let (stream, _) = listener.accept().await?;
        let state = state.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(state.clone(), req));
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}

async fn on_sigterm(state: Arc<State>) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    while term.recv().await.is_some() {
        if state.script.ignore_sigterm {
            eprintln!("fake-runner: ignoring SIGTERM");
            continue;
        }
        eprintln!("fake-runner: SIGTERM, exiting");
        let _ = std::fs::remove_file(&state.script.socket);
        release_hold(&state);
        std::process::exit(0);
    }
}

/// The server holds our stdin pipe open for our whole life; EOF means it died without stopping
/// us, so we exit rather than linger. Only when stdin is a pipe (not a terminal or /dev/null).
async fn exit_when_parent_goes(state: Arc<State>) {
    use std::os::unix::fs::FileTypeExt;
    use tokio::io::AsyncReadExt;
    let is_pipe = std::fs::metadata("/proc/self/fd/0").is_ok_and(|m| m.file_type().is_fifo());
    if !is_pipe {
        return;
    }
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
    eprintln!("fake-runner: stdin closed, the server is gone; exiting");
    let _ = std::fs::remove_file(&state.script.socket);
    release_hold(&state);
    std::process::exit(0);
}

/// Removes the `--hold` file: this runner's memory is free again.
fn release_hold(state: &State) {
    if let Some(hold) = &state.script.hold {
        let _ = std::fs::remove_file(hold);
    }
}

/// Simulated model load: progress rises in ten steps over `--slow-load`, then the final state.
async fn load(state: Arc<State>) {
    let s = &state.script;
    if s.hang_load {
        eprintln!("fake-runner: load hangs (scripted)");
        return;
    }
    const STEPS: u32 = 10;
    for step in 1..=STEPS {
        tokio::time::sleep(s.slow_load / STEPS).await;
        *state.health.lock().unwrap() = Health::Loading {
            progress: step as f32 / STEPS as f32,
        };
    }
    if let Some(code) = s.exit_at_load {
        eprintln!("fake-runner: error loading model: scripted exit {code}");
        std::process::exit(code);
    }
    let oom = s.oom_while.as_ref().is_some_and(|p| p.exists());
    let next = match s.fail_load {
        _ if oom => Health::Failed {
            kind: ErrorKind::OutOfMemory,
            message: "scripted load failure: out of memory while another model is loaded".into(),
        },
        Some(kind) => Health::Failed {
            kind,
            message: format!("scripted load failure ({kind})"),
        },
        None => Health::Ready,
    };
    if let (Health::Ready, Some(hold)) = (&next, &s.hold) {
        let _ = std::fs::write(hold, b"");
    }
    println!("fake-runner: load finished: {next:?}");
    *state.health.lock().unwrap() = next;
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, Infallible> {
    let ready = matches!(*state.health.lock().unwrap(), Health::Ready);
    let resp = match (req.method().clone(), req.uri().path()) {
        (Method::GET, "/health") => {
            let h = state.health.lock().unwrap().clone();
            json(StatusCode::OK, &h)
        }
        (Method::GET, "/info") => json(StatusCode::OK, &info(&state)),
        (Method::POST, _) if !ready => error(ErrorKind::ModelLoad, "model is not loaded"),
        (Method::POST, "/completion") => match body::<CompletionRequest>(req).await {
            Ok(r) => completion(state, r).await,
            Err(e) => e,
        },
        (Method::POST, "/embed") => match body::<EmbedRequest>(req).await {
            Ok(r) => json(StatusCode::OK, &embed(&state.script, &r)),
            Err(e) => e,
        },
        (Method::POST, "/tokenize") => match body::<TokenizeRequest>(req).await {
            Ok(r) => json(
                StatusCode::OK,
                &TokenizeResponse {
                    tokens: tokenize(&r.content, r.add_special),
                },
            ),
            Err(e) => e,
        },
        (Method::POST, "/detokenize") => match body::<DetokenizeRequest>(req).await {
            Ok(r) => json(
                StatusCode::OK,
                &DetokenizeResponse {
                    content: detokenize(&r.tokens, r.render_special),
                },
            ),
            Err(e) => e,
        },
        _ => {
            let mut r = error(ErrorKind::BadRequest, "no such endpoint");
            *r.status_mut() = StatusCode::NOT_FOUND;
            r
        }
    };
    Ok(resp)
}

fn info(state: &State) -> Info {
    let s = &state.script;
    let memory = s.memory.unwrap_or(state.model_size + 1024 * 1024);
    let vram = s.vram.min(memory);
    let devices = gpus::report(s.gpus.as_deref(), memory, vram, s.main_gpu);
    Info {
        engine: "fake-runner 0".into(),
        model_path: s.model.to_string_lossy().into_owned(),
        n_ctx: s.ctx_size,
        n_parallel: s.parallel,
        n_vocab: N_VOCAB,
        n_embd: s.n_embd,
        n_ctx_train: 8192,
        embedding: s.embedding,
        memory_bytes: memory,
        memory_device_bytes: vram,
        eog_tokens: vec![EOS],
        placement: Vec::new(),
        devices,
    }
}

async fn body<T: serde::de::DeserializeOwned>(
    req: Request<Incoming>,
) -> Result<T, Response<BoxBody>> {
    let bytes = req
        .into_body()
        .collect()
        .await
        .map_err(|e| error(ErrorKind::BadRequest, &e.to_string()))?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| error(ErrorKind::BadRequest, &e.to_string()))
}

fn json<T: serde::Serialize>(status: StatusCode, v: &T) -> Response<BoxBody> {
    let bytes = serde_json::to_vec(v).expect("serializable");
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed())
        .expect("valid response")
}

fn error(kind: ErrorKind, message: &str) -> Response<BoxBody> {
    let status = StatusCode::from_u16(kind.status()).expect("valid status");
    json(
        status,
        &ErrorBody {
            error: RunnerError::new(kind, message),
        },
    )
}

/// Streams the scripted tokens while holding a slot; the slot is released when the stream ends
/// or as soon as the client goes away (the body's receiver is dropped).
async fn completion(state: Arc<State>, req: CompletionRequest) -> Response<BoxBody> {
    if state.wedged.load(Ordering::SeqCst) {
        // The engine is stuck: the request is read but never answered.
        std::future::pending::<()>().await;
    }
    let Ok(permit) = state.slots.clone().acquire_owned().await else {
        return error(ErrorKind::Internal, "slots closed");
    };
    let seq = state.requests.fetch_add(1, Ordering::SeqCst);
    log_event(
        &state.script,
        serde_json::json!({"seq": seq, "event": "request", "request": &req}),
    );
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let _permit = permit;
        let started = Instant::now();
        let prompt_eval_count = prompt_len(&req.prompt, req.add_special);
        let script = &state.script;
        let text = match &req.prompt {
            Prompt::Text(t) => t.clone(),
            Prompt::Tokens(t) => detokenize(t, true),
        };
        let source = if script.echo {
            script::split_tokens(&text)
        } else {
            script.reply_for(&text).to_vec()
        };
        let (tokens, done_reason) = plan_output(&source, &req.stop, req.num_predict);
        let mut eval_count = 0u32;
        let cancelled = |n: u32| {
            println!("fake-runner: client disconnected, slot freed");
            log_event(
                script,
                serde_json::json!({"seq": seq, "event": "cancelled", "tokens": n}),
            );
        };
        for tok in tokens {
            // No timer for no delay: tokio's sleep(0) waits for the next 1 ms tick.
            if !script.token_delay.is_zero() {
                tokio::select! {
                    _ = tx.closed() => return cancelled(eval_count),
                    _ = tokio::time::sleep(script.token_delay) => {}
                }
            } else if tx.is_closed() {
                return cancelled(eval_count);
            }
            let logprobs = if req.logprobs {
                vec![logprob(&tok, req.top_logprobs)]
            } else {
                Vec::new()
            };
            let chunk = CompletionChunk::Token {
                content: tok,
                logprobs,
                prompt_tokens: None,
            };
            if tx.send(line(&chunk)).await.is_err() {
                return cancelled(eval_count);
            }
            eval_count += 1;
            let total = state.emitted.fetch_add(1, Ordering::SeqCst) + 1;
            if script.crash_after.is_some_and(|n| total >= n) {
                // Let the token reach the socket, then die without a final chunk.
                tokio::time::sleep(Duration::from_millis(20)).await;
                eprintln!("fake-runner: crashing after {total} tokens (scripted)");
                std::process::exit(101);
            }
            if script.wedge_after.is_some_and(|n| total >= n) {
                eprintln!("fake-runner: engine wedged after {total} tokens (scripted)");
                state.wedged.store(true, Ordering::SeqCst);
                tx.closed().await;
                return cancelled(eval_count);
            }
            if script.break_after.is_some_and(|n| total >= n) {
                eprintln!("fake-runner: stream cut after {total} tokens (scripted)");
                state.wedged.store(true, Ordering::SeqCst);
                let _ = tx.send(Bytes::from_static(b"{\"type\":\"tok")).await;
                return;
            }
        }
        let done = CompletionChunk::Done {
            done_reason,
            timings: Timings {
                prompt_eval_count,
                prompt_eval_duration_ns: 1000,
                eval_count,
                eval_duration_ns: started.elapsed().as_nanos() as u64,
                cached_tokens: 0,
                ..Timings::default()
            },
        };
        let _ = tx.send(line(&done)).await;
        log_event(
            script,
            serde_json::json!({"seq": seq, "event": "done", "tokens": eval_count}),
        );
    });
    Response::builder()
        .header(http::header::CONTENT_TYPE, runner_protocol::NDJSON)
        .body(ChannelBody(rx).boxed())
        .expect("valid response")
}

/// Appends one JSON line to the request log, if there is one. Each line is one `write` call on
/// an append-mode file, so concurrent requests' lines never interleave.
fn log_event(script: &Script, event: serde_json::Value) {
    use std::io::Write;
    let Some(path) = &script.request_log else {
        return;
    };
    let mut line = event.to_string();
    line.push('\n');
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("fake-runner: request log {}: {e}", path.display());
    }
}

/// What a completion emits: at most `num_predict` chunks (negative = all), cut before the first
/// stop string (which is not emitted). `Length` only when `num_predict` cut the output short.
fn plan_output(source: &[String], stop: &[String], num_predict: i32) -> (Vec<String>, DoneReason) {
    let limit = usize::try_from(num_predict).unwrap_or(usize::MAX);
    let mut text = String::new();
    let mut out = Vec::new();
    for tok in source {
        if out.len() == limit {
            return (out, DoneReason::Length);
        }
        let before = text.len();
        text.push_str(tok);
        let hit = stop
            .iter()
            .filter(|s| !s.is_empty())
            .filter_map(|s| text.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            if at > before {
                out.push(text[before..at].to_string());
            }
            return (out, DoneReason::Stop);
        }
        out.push(tok.clone());
    }
    (out, DoneReason::Stop)
}

/// A made-up but well-formed log-probability for a token, with `top` alternatives.
fn logprob(token: &str, top: u32) -> TokenLogprob {
    TokenLogprob {
        token: token.to_string(),
        logprob: -0.5,
        bytes: token.as_bytes().to_vec(),
        top_logprobs: (0..top.min(20))
            .map(|i| TopLogprob {
                token: if i == 0 {
                    token.to_string()
                } else {
                    format!("alt{i}")
                },
                logprob: -0.5 - i as f32,
                bytes: Vec::new(),
            })
            .collect(),
    }
}

fn line(chunk: &CompletionChunk) -> Bytes {
    let mut v = serde_json::to_vec(chunk).expect("serializable");
    v.push(b'\n');
    Bytes::from(v)
}

/// A streaming body fed by a channel; dropping it (connection gone) closes the channel.
struct ChannelBody(mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|o| o.map(|b| Ok(Frame::data(b))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_honours_num_predict_and_stop_strings() {
        let src = script::split_tokens("one two three four");
        let cases: &[(&[&str], i32, &[&str], DoneReason)] = &[
            (
                &[],
                -1,
                &["one", " two", " three", " four"],
                DoneReason::Stop,
            ),
            (&[], 2, &["one", " two"], DoneReason::Length),
            (
                &[],
                4,
                &["one", " two", " three", " four"],
                DoneReason::Stop,
            ),
            (&[], 0, &[], DoneReason::Length),
            (&["thr"], -1, &["one", " two", " "], DoneReason::Stop),
            // A stop string starting in an already-sent chunk ends the output there (no retraction).
            (&["e t"], -1, &["one"], DoneReason::Stop),
            (&["one"], -1, &[], DoneReason::Stop),
            (
                &["zzz", " f"],
                -1,
                &["one", " two", " three"],
                DoneReason::Stop,
            ),
        ];
        for (stop, n, want, reason) in cases {
            let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
            let (out, r) = plan_output(&src, &stop, *n);
            assert_eq!(out, *want, "stop {stop:?} n {n}");
            assert_eq!(r, *reason, "stop {stop:?} n {n}");
        }
    }
}
