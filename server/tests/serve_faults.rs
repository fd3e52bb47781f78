//! Faults seen from the HTTP side, with the fake runner: a runner killed mid-stream ends the
//! NDJSON stream with an `{"error":…}` line (status already 200) and the next request reloads;
//! admission overflow answers 503 with Retry-After; a client that goes away frees the runner
//! slot at once. Needs `cargo build -p fake-runner` first.

mod serve_support;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::json;
use serve_support::api_support::post_json;
use serve_support::*;

const SLOW: &[&str] = &[
    "--tokens",
    "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen",
    "--token-delay-ms",
    "150",
];

#[tokio::test]
async fn runner_killed_mid_stream_ends_with_an_error_line() {
    let h = Harness::new();
    h.fake("slow", SLOW, &[]);
    let resp = h
        .open("/api/generate", json!({"model": "slow", "prompt": "hi"}))
        .await;
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut buf = String::new();
    let first = next_lines(&mut body, &mut buf).await.unwrap();
    assert!(first[0].contains("\"done\":false"), "{first:?}");

    let pid = h.runner_pid().await;
    let killed = Instant::now();
    scheduler_support::kill9(pid);
    let mut rest = Vec::new();
    while let Some(mut ls) = next_lines(&mut body, &mut buf).await {
        rest.append(&mut ls);
    }
    let waited = killed.elapsed();
    println!("error line {waited:?} after kill -9");
    assert!(
        waited < Duration::from_secs(1),
        "error line took {waited:?}"
    );
    let last: serde_json::Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    let msg = last["error"]
        .as_str()
        .unwrap_or_else(|| panic!("error line: {rest:?}"));
    assert!(!msg.is_empty());
    assert!(
        rest.iter().all(|l| !l.contains("\"done\":true")),
        "{rest:?}"
    );

    // The next request loads a fresh runner and succeeds.
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

#[tokio::test]
async fn queue_overflow_is_503_with_retry_after() {
    let h = Harness::with(|c| c.max_queue = 1, Default::default());
    h.fake("slow", SLOW, &[]);
    let held = h
        .open("/api/generate", json!({"model": "slow", "prompt": "hi"}))
        .await;
    assert_eq!(held.status(), StatusCode::OK);
    let started = Instant::now();
    for (uri, body) in [
        ("/api/generate", json!({"model": "slow", "prompt": "x"})),
        (
            "/api/chat",
            json!({"model": "slow", "messages": [{"role": "user", "content": "x"}]}),
        ),
        ("/api/embed", json!({"model": "slow", "input": "x"})),
    ] {
        let r = h.post(uri, body).await;
        assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{uri}");
        assert_eq!(r.headers["retry-after"], "1");
        assert_eq!(
            r.json(),
            json!({"error": "server busy, please try again.  maximum pending requests exceeded"})
        );
    }
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "rejected fast"
    );
    drop(held);
    // With the slot back, requests are admitted again.
    let r = h
        .post(
            "/api/generate",
            json!({"model": "slow", "prompt": "x", "stream": false, "options": {"num_predict": 1}}),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

#[tokio::test]
async fn client_disconnect_frees_the_slot() {
    let h = Harness::new();
    h.fake("slow", SLOW, &[]);
    let resp = h
        .open(
            "/api/chat",
            json!({"model": "slow", "messages": [{"role": "user", "content": "x"}]}),
        )
        .await;
    let mut body = resp.into_body();
    let mut buf = String::new();
    next_lines(&mut body, &mut buf).await.unwrap();
    // 14 tokens × 150 ms remain; the next request on this 1-slot runner must not wait for them.
    drop(body);
    let t = Instant::now();
    let r = h
        .post(
            "/api/generate",
            json!({"model": "slow", "prompt": "x", "stream": false, "options": {"num_predict": 1}}),
        )
        .await;
    let took = t.elapsed();
    println!("next request after a disconnect took {took:?}");
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert_eq!(r.json()["response"], "one");
    assert!(
        took < Duration::from_millis(1000),
        "slot freed promptly: {took:?}"
    );
}

#[tokio::test]
async fn six_hundred_requests_against_a_queue_of_512() {
    let h = Harness::with(|c| c.max_queue = 512, Default::default());
    // One slot, and the first request holds it: everyone admitted after it waits.
    h.fake(
        "slow",
        &["--tokens", "a b c", "--token-delay-ms", "5000"],
        &[],
    );
    let held = h
        .open("/api/generate", json!({"model": "slow", "prompt": "x"}))
        .await;
    assert_eq!(held.status(), StatusCode::OK);
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..599 {
        let app = h.app.clone();
        tasks.spawn(async move {
            let body = json!({"model": "slow", "prompt": format!("{i}"), "stream": false});
            let r = post_json(&app, "/api/generate", body).await;
            (r.status, started.elapsed())
        });
    }
    // 1 active + 511 waiting fill the queue; exactly the other 88 are refused, quickly.
    let mut refused = 0;
    while refused < 88 {
        let Ok(Some(done)) = tokio::time::timeout(Duration::from_secs(3), tasks.join_next()).await
        else {
            break;
        };
        let (status, at) = done.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(at < Duration::from_secs(2), "503 after {at:?}");
        refused += 1;
    }
    assert_eq!(refused, 88);
    // Nobody else finishes while the slot is held.
    let more = tokio::time::timeout(Duration::from_millis(300), tasks.join_next()).await;
    assert!(more.is_err(), "no further replies while the queue is full");
    println!("88 refusals within {:?}", started.elapsed());
    tasks.abort_all();
    drop(held);
    // Aborted waiters leave; the queue admits again.
    let r = h
        .post("/api/embed", json!({"model": "slow", "input": "x"}))
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
}

#[tokio::test]
async fn a_runner_that_hangs_at_load_fails_the_request_and_is_reaped() {
    let h = Harness::with(
        |c| c.load_timeout = Some(Duration::from_millis(800)),
        Default::default(),
    );
    h.fake("stuck", &["--hang-load"], &[]);
    let t = Instant::now();
    let r = h
        .post("/api/generate", json!({"model": "stuck", "prompt": "x"}))
        .await;
    let took = t.elapsed();
    println!("load stall reported after {took:?}: {}", r.text());
    assert!(r.status.is_server_error(), "{} {}", r.status, r.text());
    assert!(!r.json()["error"].as_str().unwrap().is_empty());
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(h.ps().await.is_empty());
    // The stuck process was stopped and reaped: no child of ours mentions its model blob.
    let blobs = h.ts.root().join("blobs");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !scheduler_support::children_mentioning(&blobs).is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        scheduler_support::children_mentioning(&blobs).is_empty(),
        "no zombie runner"
    );
}

/// load_duration covers scheduling and loading only: a request that waited for the one busy slot
/// of a loaded runner counts that wait in total_duration, not in load_duration (as Ollama, whose
/// scheduler hands the runner over before a slot is waited for); one that waited for the load
/// counts the load.
#[tokio::test]
async fn waiting_for_a_busy_slot_is_not_load_duration() {
    let h = Harness::with(|c| c.num_parallel = 1, Default::default());
    h.fake(
        "slowload",
        &[
            "--tokens",
            "a b c",
            "--token-delay-ms",
            "300",
            "--slow-load",
            "0.6",
        ],
        &[],
    );
    let body = |p: &str| json!({"model": "slowload", "prompt": p, "stream": false});
    let (first, second) = tokio::join!(post_json(&h.app, "/api/generate", body("one")), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        post_json(&h.app, "/api/generate", body("two")).await
    });
    let ms = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap() as f64 / 1e6;
    let (a, b) = (first.json(), second.json());
    // The first request loaded the runner (0.6 s); so did the second wait for it, then for the
    // first's three tokens (0.9 s).
    assert!(ms(&a, "load_duration") >= 500.0, "{a}");
    assert!(ms(&b, "load_duration") >= 400.0, "{b}");
    assert!(
        ms(&b, "total_duration") - ms(&b, "load_duration") >= 1500.0,
        "{b}"
    );
    assert!(
        ms(&b, "load_duration") < ms(&a, "load_duration") + 100.0,
        "{a} {b}"
    );
    // Loaded now: waiting for the busy slot is not loading.
    let (c, d) = tokio::join!(post_json(&h.app, "/api/generate", body("three")), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        post_json(&h.app, "/api/generate", body("four")).await
    });
    let (c, d) = (c.json(), d.json());
    assert!(
        ms(&c, "load_duration") > 0.0 && ms(&c, "load_duration") < 300.0,
        "{c}"
    );
    assert!(
        ms(&d, "load_duration") > 0.0 && ms(&d, "load_duration") < 300.0,
        "{d}"
    );
    assert!(
        ms(&d, "total_duration") >= 1000.0,
        "it waited for the slot: {d}"
    );
}
