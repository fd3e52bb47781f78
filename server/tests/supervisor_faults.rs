//! Supervisor fault tests against the fake runner: crashes, hangs, slow loads, stubborn
//! processes and cancelled streams. Needs `cargo build -p fake-runner` first.

#[path = "scheduler_support/mod.rs"]
mod support;

use futures_util::StreamExt;
use runner_protocol::{
    CompletionChunk, CompletionRequest, DetokenizeRequest, DoneReason, EmbedRequest, ErrorKind,
    LoadOptions, Prompt, TokenizeRequest,
};
use server::error::Error;
use server::runner::{create_runner_dir, Runner, SpawnConfig};
use std::time::{Duration, Instant};
use support::*;

struct Env {
    dir: tempfile::TempDir,
    models: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Self {
            dir: create_runner_dir().unwrap(),
            models: tempfile::tempdir().unwrap(),
        }
    }

    fn spawn_config(&self) -> SpawnConfig {
        let mut c = SpawnConfig::new(fake_runner(), self.dir.path());
        c.health_interval = Duration::from_millis(20);
        c.stop_grace = Duration::from_secs(2);
        c.load_timeout = Some(Duration::from_secs(5));
        c
    }

    fn options(&self, name: &str, script: &[&str]) -> LoadOptions {
        LoadOptions {
            model: fake_model(self.models.path(), name, script),
            ctx_size: 256,
            ..Default::default()
        }
    }
}

fn prompt(n: i32) -> CompletionRequest {
    CompletionRequest {
        prompt: Prompt::Text("hi".into()),
        num_predict: n,
        ..Default::default()
    }
}

#[tokio::test]
async fn protocol_round_trip() {
    let env = Env::new();
    let opts = env.options("m", &["--tokens", "Hello, big world", "--n-embd", "8"]);
    let r = Runner::start(&env.spawn_config(), "m", opts.clone())
        .await
        .unwrap();
    assert_eq!(r.info().n_ctx, 256);
    assert_eq!(r.info().model_path, opts.model.to_string_lossy());

    let chunks: Vec<_> = r.completion(&prompt(-1)).await.unwrap().collect().await;
    let text: String = chunks
        .iter()
        .filter_map(|c| match c {
            Ok(CompletionChunk::Token { content, .. }) => Some(content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello, big world");
    match chunks.last().unwrap() {
        Ok(CompletionChunk::Done {
            done_reason,
            timings,
        }) => {
            assert_eq!(*done_reason, DoneReason::Stop);
            assert_eq!(timings.eval_count, 3);
        }
        other => panic!("unexpected final item {other:?}"),
    }
    // num_predict bounds the output and changes the reason.
    let chunks: Vec<_> = r.completion(&prompt(1)).await.unwrap().collect().await;
    assert_eq!(chunks.len(), 2);
    assert!(matches!(
        chunks[1],
        Ok(CompletionChunk::Done {
            done_reason: DoneReason::Length,
            ..
        })
    ));

    let toks = r
        .tokenize(&TokenizeRequest {
            content: "abc".into(),
            add_special: false,
            parse_special: false,
        })
        .await
        .unwrap();
    assert_eq!(toks.tokens.len(), 3);
    let back = r
        .detokenize(&DetokenizeRequest {
            tokens: toks.tokens,
            render_special: false,
        })
        .await
        .unwrap();
    assert_eq!(back.content, "abc");
    let emb = r
        .embed(&EmbedRequest {
            inputs: vec![Prompt::Text("x".into())],
            truncate: true,
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(emb.embeddings[0].len(), 8);

    let pid = r.pid();
    let exit = r.stop().await;
    assert_eq!(exit.status, "exit status: 0", "SIGTERM is a clean exit");
    assert!(gone(pid));
}

#[tokio::test]
async fn kill9_mid_stream_ends_the_stream_within_a_second() {
    let env = Env::new();
    let opts = env.options(
        "m",
        &["--tokens", "a b c d e f g h i j", "--token-delay-ms", "300"],
    );
    let r = Runner::start(&env.spawn_config(), "m", opts).await.unwrap();
    let mut s = r.completion(&prompt(-1)).await.unwrap();
    assert!(matches!(
        s.next().await,
        Some(Ok(CompletionChunk::Token { .. }))
    ));
    let killed = Instant::now();
    kill9(r.pid());
    let item = tokio::time::timeout(Duration::from_secs(1), s.next())
        .await
        .expect("the stream must end within 1 s of the runner dying");
    match item {
        Some(Err(Error::RunnerExited(m))) => {
            assert!(m.contains("terminated") && m.contains("signal: 9"), "{m}")
        }
        other => panic!("expected RunnerExited, got {other:?}"),
    }
    let latency = killed.elapsed();
    eprintln!("kill -9 → stream error in {latency:?}");
    assert!(latency < Duration::from_secs(1));
    assert!(
        s.next().await.is_none(),
        "nothing follows the terminal error"
    );
    // Requests fail fast once the process is gone, and it is reaped.
    let t = Instant::now();
    assert!(matches!(
        r.tokenize(&TokenizeRequest {
            content: "x".into(),
            add_special: false,
            parse_special: false
        })
        .await,
        Err(Error::RunnerExited(_))
    ));
    assert!(t.elapsed() < Duration::from_millis(100));
    assert!(
        wait_gone(r.pid(), Duration::from_secs(1)).await,
        "reaped, not a zombie"
    );
}

#[tokio::test]
async fn crash_mid_stream_reports_status_and_output_tail() {
    let env = Env::new();
    let opts = env.options("m", &["--tokens", "a b c d e", "--crash-after", "2"]);
    let r = Runner::start(&env.spawn_config(), "m", opts).await.unwrap();
    let items: Vec<_> = r.completion(&prompt(-1)).await.unwrap().collect().await;
    assert_eq!(items.len(), 3, "{items:?}");
    assert!(items[..2]
        .iter()
        .all(|i| matches!(i, Ok(CompletionChunk::Token { .. }))));
    match &items[2] {
        Err(Error::RunnerExited(m)) => {
            assert!(m.contains("exit status: 101"), "{m}");
            assert!(
                m.contains("crashing after 2 tokens"),
                "tail in message: {m}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(r.output_tail().contains("listening on"));
}

#[tokio::test]
async fn hang_at_load_hits_the_stall_deadline_and_is_reaped() {
    let env = Env::new();
    let mut cfg = env.spawn_config();
    cfg.load_timeout = Some(Duration::from_millis(500));
    let r = Runner::spawn(&cfg, "m", env.options("m", &["--hang-load"])).unwrap();
    let t = Instant::now();
    let err = r.wait_ready(cfg.load_timeout).await.unwrap_err();
    let took = t.elapsed();
    match err {
        Error::RunnerExited(m) => {
            assert!(
                m.starts_with("timed out waiting for llama runner to start - progress 0.00"),
                "{m}"
            );
            assert!(m.contains("load hangs"), "tail in message: {m}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(gone(r.pid()), "stopped and reaped before the error returns");
}

#[tokio::test]
async fn slow_load_with_progress_outlives_the_stall_deadline() {
    let env = Env::new();
    let mut cfg = env.spawn_config();
    cfg.load_timeout = Some(Duration::from_millis(600));
    let t = Instant::now();
    // Ten progress steps 250 ms apart: 2.5 s in all, never 600 ms without progress.
    let r = Runner::start(&cfg, "m", env.options("m", &["--slow-load", "2.5"]))
        .await
        .unwrap();
    assert!(t.elapsed() >= Duration::from_millis(2500));
    r.stop().await;
}

#[tokio::test]
async fn ignored_sigterm_gets_sigkill_after_the_grace_period() {
    let env = Env::new();
    let mut cfg = env.spawn_config();
    cfg.stop_grace = Duration::from_millis(400);
    let r = Runner::start(&cfg, "m", env.options("m", &["--ignore-sigterm"]))
        .await
        .unwrap();
    let t = Instant::now();
    let exit = r.stop().await;
    let took = t.elapsed();
    assert!(exit.status.contains("signal: 9"), "{}", exit.status);
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(2),
        "{took:?}"
    );
    assert!(gone(r.pid()));
    assert!(r.output_tail().contains("ignoring SIGTERM"));
}

#[tokio::test]
async fn failed_load_is_a_typed_error() {
    let env = Env::new();
    let cfg = env.spawn_config();
    let r = Runner::spawn(&cfg, "m", env.options("m", &["--fail-load", "OutOfMemory"])).unwrap();
    match r.wait_ready(cfg.load_timeout).await {
        Err(Error::Runner(e)) => assert_eq!(e.kind, ErrorKind::OutOfMemory),
        other => panic!("unexpected {other:?}"),
    }
    assert!(gone(r.pid()));
}

#[tokio::test]
async fn exit_during_load_reports_status_and_tail() {
    let env = Env::new();
    let cfg = env.spawn_config();
    let err = Runner::start(&cfg, "m", env.options("m", &["--exit-at-load", "3"]))
        .await
        .unwrap_err();
    match err {
        Error::RunnerExited(m) => {
            assert!(m.contains("exit status: 3"), "{m}");
            assert!(m.contains("error loading model"), "{m}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn missing_binary_is_an_error_not_a_panic() {
    let env = Env::new();
    let mut cfg = env.spawn_config();
    cfg.binary = env.models.path().join("no-such-runner");
    let err = Runner::start(&cfg, "m", env.options("m", &[]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::RunnerExited(ref m) if m.contains("failed to start")),
        "{err:?}"
    );
}

#[tokio::test]
async fn dropping_a_stream_frees_the_slot_at_once() {
    let env = Env::new();
    let opts = env.options(
        "m",
        &["--tokens", "a b c d e f g h", "--token-delay-ms", "250"],
    );
    let r = Runner::start(&env.spawn_config(), "m", opts).await.unwrap();
    let mut s = r.completion(&prompt(-1)).await.unwrap();
    assert!(s.next().await.is_some());
    drop(s);
    // One slot: had it not been freed, the next first token would wait ~1.75 s.
    let t = Instant::now();
    let mut s2 = r.completion(&prompt(-1)).await.unwrap();
    assert!(matches!(
        s2.next().await,
        Some(Ok(CompletionChunk::Token { .. }))
    ));
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    drop(s2);
    r.stop().await;
}

#[tokio::test]
async fn dropping_the_last_handle_kills_the_process() {
    let env = Env::new();
    let r = Runner::start(
        &env.spawn_config(),
        "m",
        env.options("m", &["--ignore-sigterm"]),
    )
    .await
    .unwrap();
    let pid = r.pid();
    drop(r);
    assert!(wait_gone(pid, Duration::from_secs(2)).await);
    assert!(children_mentioning(env.dir.path()).is_empty());
}

#[tokio::test]
async fn a_runner_exits_when_the_server_side_of_its_stdin_closes() {
    // Stands in for the server dying without stopping its runners: the supervisor holds the
    // write end of the runner's stdin, so its death closes the pipe.
    let env = Env::new();
    let socket = env.dir.path().join("orphan.sock");
    let mut child = tokio::process::Command::new(fake_runner())
        .arg("--socket")
        .arg(&socket)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let client = server::runner::RunnerClient::new(&socket);
    let t = Instant::now();
    while client.health().await.is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "runner never listened"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(child.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(2), child.wait())
        .await
        .expect("exits on stdin EOF")
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn request_fields_reach_the_runner() {
    let env = Env::new();
    let r = Runner::start(&env.spawn_config(), "m", env.options("m", &["--echo"]))
        .await
        .unwrap();
    let req = CompletionRequest {
        prompt: Prompt::Text("alpha beta gamma".into()),
        stop: vec!["gam".into()],
        logprobs: true,
        top_logprobs: 2,
        ..Default::default()
    };
    let items: Vec<_> = r.completion(&req).await.unwrap().collect().await;
    let mut text = String::new();
    for item in &items[..items.len() - 1] {
        match item {
            Ok(CompletionChunk::Token {
                content, logprobs, ..
            }) => {
                text.push_str(content);
                assert_eq!(logprobs.len(), 1);
                assert_eq!(logprobs[0].top_logprobs.len(), 2);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(text, "alpha beta ");
    assert!(matches!(
        items.last(),
        Some(Ok(CompletionChunk::Done {
            done_reason: DoneReason::Stop,
            ..
        }))
    ));
    r.stop().await;
}

#[tokio::test]
async fn a_frozen_loader_hits_the_stall_deadline_and_is_killed() {
    let env = Env::new();
    let mut cfg = env.spawn_config();
    cfg.load_timeout = Some(Duration::from_millis(500));
    cfg.stop_grace = Duration::from_millis(300);
    let r = Runner::spawn(&cfg, "m", env.options("m", &["--slow-load", "10"])).unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let pid = nix::unistd::Pid::from_raw(r.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let err = r.wait_ready(cfg.load_timeout).await.unwrap_err();
    assert!(
        matches!(err, Error::RunnerExited(ref m) if m.starts_with("timed out waiting")),
        "{err:?}"
    );
    // A stopped process cannot act on SIGTERM; SIGKILL after the grace period still ends it.
    assert!(r.exit_info().unwrap().status.contains("signal: 9"));
    assert!(gone(r.pid()));
}
