//! Issue 22 item 3, with the real runner on SmolLM2-135M: a client that disconnects during a
//! long prefill frees the runner at once (llama.cpp's abort callback stops the chunk in flight),
//! and a request decoding beside it produces byte-identical output to a run without the abort.
//! (On the CPU a long prompt's chunk is a step of its own (plan::compose, batch invariance), so
//! here the neighbour decodes between the aborted chunks; the roll-back of sequences that share
//! an aborted step is what mixed GPU steps rely on.)
//!
//! Also (item 1): the runner's prefill heartbeats keep a prefill that is longer than the
//! progress deadline, but made of chunks shorter than it, from being killed as stuck.
//!
//! Needs `cargo build -p runner-llamacpp` and `scripts/fetch-test-models`; a missing one fails
//! the test unless `HERD_ALLOW_SKIP=1`. One inference thread (a shared 2-core box).

mod serve_support;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde_json::{json, Value};
use serve_support::*;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn native() -> Option<Harness> {
    native_with(|_| {})
}

fn native_with(tweak: impl FnOnce(&mut server::scheduler::SchedulerConfig)) -> Option<Harness> {
    let missing = |what: &str| {
        assert!(
            std::env::var("HERD_ALLOW_SKIP").as_deref() == Ok("1"),
            "{what} missing (set HERD_ALLOW_SKIP=1 to skip)"
        );
        eprintln!("skipped: {what} missing");
        None
    };
    let Some(runner) = native_runner() else {
        return missing("runner-llamacpp (cargo build -p runner-llamacpp)");
    };
    let Some(model) = test_model(SMOL) else {
        return missing("SmolLM2 (scripts/fetch-test-models)");
    };
    let h = Harness::with_runner(
        runner,
        |c| {
            c.load_timeout = Some(Duration::from_secs(120));
            c.num_parallel = 2;
            tweak(c);
        },
        Default::default(),
    );
    register_file(&h.ts, "smol", &model, &[]);
    Some(h)
}

/// Every request uses the same load options, so one runner (2 slots) serves them all.
fn options(n: u32) -> Value {
    json!({"temperature": 0, "seed": 7, "num_predict": n, "num_thread": 1, "num_ctx": 8192})
}

fn short(n: u32) -> Value {
    json!({"model": "smol", "prompt": "List three colours:", "raw": true, "stream": false,
           "options": options(n)})
}

#[tokio::test]
async fn a_disconnect_mid_prefill_frees_the_runner_and_spares_its_neighbour() {
    let Some(h) = native() else {
        return;
    };
    // Reference output of the neighbour, alone (this also loads the runner).
    let reference = h.post("/api/generate", short(40)).await;
    assert_eq!(reference.status, StatusCode::OK, "{}", reference.text());
    let reference = reference.json()["response"].as_str().unwrap().to_owned();
    assert!(!reference.is_empty());

    // A long prompt: ~6000 tokens, several 512-token chunks of seconds each on one thread.
    let long = "the quick brown fox jumps over the lazy dog ".repeat(600);
    let long = json!({"model": "smol", "prompt": long, "raw": true, "options": options(1)});
    let neighbour = h.post("/api/generate", short(40));
    let (neighbour, freed) = tokio::join!(neighbour, async {
        // The long request prefills for 1.5 s, then its client goes away mid-chunk.
        let gone =
            tokio::time::timeout(Duration::from_millis(1500), h.open("/api/generate", long)).await;
        assert!(gone.is_err(), "the long prompt was still prefilling");
        let disconnected = Instant::now();
        // The next request must not wait for the abandoned chunk to finish.
        let next = h.post("/api/generate", short(1)).await;
        assert_eq!(next.status, StatusCode::OK, "{}", next.text());
        disconnected.elapsed()
    });
    println!("next request done {freed:?} after the disconnect");
    assert_eq!(neighbour.status, StatusCode::OK, "{}", neighbour.text());
    assert_eq!(
        neighbour.json()["response"].as_str().unwrap(),
        reference,
        "the neighbour's output is unaffected by the abort"
    );
    assert!(freed < Duration::from_millis(800), "took {freed:?}");
}

#[tokio::test]
async fn a_long_prefill_is_not_mistaken_for_a_stuck_runner() {
    // Each 32-token chunk takes well under the deadline even on a loaded 2-core box (~1 s
    // measured), while the whole ~800-token prompt takes several deadlines even unloaded.
    let progress = Duration::from_secs(2);
    let Some(h) = native_with(|c| c.liveness.progress_timeout = Some(progress)) else {
        return;
    };
    // 32-token chunks (well under the deadline each) of a prompt that takes several deadlines.
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(80);
    let opts = json!({"temperature": 0, "num_predict": 1, "num_thread": 1, "num_batch": 32});
    let warm = h
        .post(
            "/api/generate",
            json!({"model": "smol", "prompt": "hi", "raw": true, "stream": false, "options": opts}),
        )
        .await;
    assert_eq!(warm.status, StatusCode::OK, "{}", warm.text());
    let pid = h.runner_pid().await;
    let t = Instant::now();
    let r = h
        .post(
            "/api/generate",
            json!({"model": "smol", "prompt": prompt, "raw": true, "stream": false, "options": opts}),
        )
        .await;
    let took = t.elapsed();
    println!(
        "prefill of {} tokens took {took:?}",
        r.json()["prompt_eval_count"]
    );
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    assert!(
        took > progress,
        "the prefill outlasts the deadline ({took:?}): the test means something"
    );
    assert_eq!(h.runner_pid().await, pid, "the runner was not killed");
}
