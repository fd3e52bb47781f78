//! Runner faults seen from the HTTP side (issue 22, items 1 and 2), with the fake runner: a
//! runner that stops answering ends its stream with an `{"error":…}` line and the next request
//! reloads; a runner whose stream breaks strands no request that was waiting for it. Needs
//! `cargo build -p fake-runner` first.

mod serve_support;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;
use serve_support::*;
use server::runner::Liveness;

fn quick(c: &mut server::scheduler::SchedulerConfig) {
    c.liveness = Liveness {
        progress_timeout: Some(Duration::from_secs(30)),
        probe_interval: Some(Duration::from_millis(100)),
        probe_timeout: Duration::from_millis(500),
    };
}

/// Reads the rest of an NDJSON body.
async fn rest_of(body: &mut axum::body::Body, buf: &mut String) -> Vec<String> {
    let mut rest = Vec::new();
    while let Some(mut ls) = next_lines(body, buf).await {
        rest.append(&mut ls);
    }
    rest
}

#[tokio::test]
async fn a_sigstopped_runner_ends_its_stream_with_an_error_line() {
    let h = Harness::with(quick, Default::default());
    h.fake(
        "slow",
        &[
            "--tokens",
            "one two three four five six",
            "--token-delay-ms",
            "100",
        ],
        &[],
    );
    let resp = h
        .open("/api/generate", json!({"model": "slow", "prompt": "hi"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut buf = String::new();
    next_lines(&mut body, &mut buf).await.unwrap();
    let pid = h.runner_pid().await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let t = Instant::now();
    let rest = tokio::time::timeout(Duration::from_secs(5), rest_of(&mut body, &mut buf))
        .await
        .expect("the stream of a stopped runner ends");
    println!("error line {:?} after SIGSTOP", t.elapsed());
    let last: serde_json::Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    let msg = last["error"].as_str().unwrap_or_else(|| panic!("{rest:?}"));
    assert!(msg.contains("stopped responding"), "{msg}");
    assert!(scheduler_support::wait_gone(pid, Duration::from_secs(2)).await);

    let r = h
        .post(
            "/api/generate",
            json!({"model": "slow", "prompt": "hi", "stream": false, "options": {"num_predict": 2}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["response"], "one two");
    assert_ne!(h.runner_pid().await, pid);
}

/// The race of item 2 through the API: the runner cuts the streaming request mid-line and its
/// engine is dead; the request waiting for the slot must finish on a fresh runner, not hang.
#[tokio::test]
async fn a_broken_runner_strands_no_waiting_request() {
    let h = Harness::new();
    h.fake(
        "brittle",
        &[
            "--tokens",
            "one two three four",
            "--token-delay-ms",
            "50",
            "--break-after",
            "3",
        ],
        &[],
    );
    let resp = h
        .open("/api/generate", json!({"model": "brittle", "prompt": "hi"}))
        .await;
    let mut body = resp.into_body();
    let mut buf = String::new();
    next_lines(&mut body, &mut buf).await.unwrap();
    let pid = h.runner_pid().await;
    let waiting = h.post(
        "/api/generate",
        json!({"model": "brittle", "prompt": "x", "stream": false, "options": {"num_predict": 2}}),
    );
    let (b, rest) = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(waiting, rest_of(&mut body, &mut buf))
    })
    .await
    .expect("no request hangs on a broken runner");
    assert!(
        rest.last().is_some_and(|l| l.contains("\"error\"")),
        "{rest:?}"
    );
    assert_eq!(b.status, StatusCode::OK, "{}", b.text());
    assert_eq!(b.json()["response"], "one two");
    assert_ne!(h.runner_pid().await, pid);
}
