//! Slot compaction: when a request in the middle of the busy slots finishes, the engine moves
//! the highest busy request down into the hole (a KV stream copy), so a step stays one
//! micro-batch. The moved request must go on exactly as if nothing happened: gemma-3-270m at
//! temperature 0 with the default (batch-invariant) flags, on one thread. With step padding on
//! (the GPU default, `plan::padding`), the hole a finished request leaves is filled with a
//! throwaway row instead, and again nobody's output changes.

mod common;

use common::*;
use http_body_util::BodyExt;
use serde_json::Value;

/// Stream `body` to the end; `first` fires when the first chunk has arrived.
async fn stream(
    socket: std::path::PathBuf,
    body: Value,
    first: tokio::sync::oneshot::Sender<()>,
) -> Completion {
    let resp = send(&socket, "POST", "/completion", Some(body)).await;
    assert_eq!(resp.status(), hyper::StatusCode::OK);
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    let mut first = Some(first);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            bytes.extend_from_slice(&data);
            if let Some(tx) = first.take() {
                let _ = tx.send(());
            }
        }
    }
    parse_stream(&bytes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_moved_into_a_finished_slot_continues_unchanged() {
    let _guard = serial().await;
    let flags = ["--ctx-size", "256", "--parallel", "4"];
    let reqs = [
        greedy("The capital of France is", 40),
        greedy("1, 2, 3, 4,", 12),
        greedy("Once upon a time, in a small village,", 40),
    ];
    let solo = solo(&flags, &reqs).await;
    let r = Logged::ready(&gemma(), &flags).await;
    // Admit A, B, C one after the other (slots 0, 1, 2); B stops first and leaves a hole.
    let got = staggered(r.socket(), &reqs).await;
    let lines = r.lines();
    assert!(
        lines.iter().any(|l| l == "moved slot 2 to slot 1"),
        "no compaction logged: {lines:?}"
    );
    // Padding is a GPU default: the CPU keeps its steps as they are.
    assert!(
        !lines.iter().any(|l| l.contains("padded")),
        "padded on the CPU by default: {lines:?}"
    );
    assert_eq!(got, solo);
}

/// Each request's text when it runs alone on a runner with `flags`.
async fn solo(flags: &[&str], reqs: &[Value]) -> Vec<String> {
    let r = Runner::spawn(&gemma(), flags);
    r.wait_ready().await;
    let mut out = Vec::new();
    for q in reqs {
        out.push(complete(&r.socket, q.clone()).await.text);
    }
    out
}

/// Admit every request in `reqs` one after the other (each waits for the one before to
/// stream), and collect their texts.
async fn staggered(socket: &std::path::Path, reqs: &[Value]) -> Vec<String> {
    let mut handles = Vec::new();
    for q in reqs {
        let (tx, rx) = tokio::sync::oneshot::channel();
        handles.push(tokio::spawn(stream(socket.to_path_buf(), q.clone(), tx)));
        rx.await.expect("first chunk");
    }
    let mut got = Vec::new();
    for h in handles {
        got.push(h.await.unwrap().text);
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_steps_leave_every_request_unchanged() {
    let _guard = serial().await;
    let flags = ["--ctx-size", "256", "--parallel", "4"];
    let reqs = [
        greedy("The capital of France is", 40),
        greedy("1, 2, 3, 4,", 12),
        greedy("Once upon a time, in a small village,", 40),
        greedy("The best way to learn a language is", 36),
    ];
    let solo = solo(&flags, &reqs).await;
    let padded = [&flags[..], &["--step-padding", "on"]].concat();
    let r = Logged::ready(&gemma(), &padded).await;
    // Slots 0-3; B (slot 1) ends first, D moves into its hole, and the three left decode with a
    // pad row in slot 3, whose cache holds D's history.
    let got = staggered(r.socket(), &reqs).await;
    let lines = r.lines();
    assert!(
        lines.iter().any(|l| l == "moved slot 3 to slot 1"),
        "no compaction logged: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l == "padded a decode step of 3 sequences with idle [3]"),
        "no padded step logged: {lines:?}"
    );
    assert_eq!(got, solo);
}

/// `--prewake on` (the GPU default: the sampling pool is woken before a decode step's logits
/// land; on the CPU `auto` leaves it off) changes when the pool's threads are awake, never what
/// they sample: with a pool of two threads and four requests decoding together, each request's
/// text is its solo text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prewaking_the_sampling_pool_leaves_every_request_unchanged() {
    let _guard = serial().await;
    let flags = [
        "--ctx-size",
        "256",
        "--parallel",
        "4",
        "--sample-threads",
        "2",
    ];
    let reqs = [
        greedy("The capital of France is", 40),
        sampled("1, 2, 3, 4,", 24, 3),
        greedy("Once upon a time, in a small village,", 40),
        sampled("The best way to learn a language is", 36, 9),
    ];
    let solo = solo(&flags, &reqs).await;
    let woken = [&flags[..], &["--prewake", "on", "--step-stats", "16"]].concat();
    let r = Logged::ready(&gemma(), &woken).await;
    let got = staggered(r.socket(), &reqs).await;
    assert_eq!(got, solo);
    let lines = r.lines();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("step stats every 16 steps; sampling pool 2")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l == "sampling pool prewake on (on)"),
        "{lines:?}"
    );
}
