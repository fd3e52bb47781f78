//! Scheduler tests against the fake runner: admission, slots, keep-alive, eviction, reloads after
//! crashes, and shutdown. Needs `cargo build -p fake-runner` first.

#[path = "scheduler_support/mod.rs"]
mod support;

use futures_util::StreamExt;
use runner_protocol::{CompletionChunk, ErrorKind};
use server::error::Error;
use server::scheduler::{KeepAlive, Scheduler};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use support::*;
use tokio::sync::{mpsc, watch};

async fn text_of(lease: server::scheduler::Lease) -> Result<String, Error> {
    let mut s = lease.into_completion(&prompt()).await?;
    let mut out = String::new();
    while let Some(item) = s.next().await {
        match item? {
            CompletionChunk::Token { content, .. } => out.push_str(&content),
            CompletionChunk::Done { .. } => return Ok(out),
            CompletionChunk::Error { error } => return Err(Error::Runner(error)),
            CompletionChunk::Progress { .. } => panic!("heartbeats never reach consumers"),
        }
    }
    Err(Error::Internal("stream ended without done".into()))
}

#[tokio::test]
async fn runner_crash_mid_stream_then_the_next_acquire_reloads() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let req = env.request("m", &["--tokens", "a b c d e f", "--token-delay-ms", "200"]);
    let lease = sched.acquire(req.clone()).await.unwrap();
    let first_pid = lease.pid();
    let mut s = lease.into_completion(&prompt()).await.unwrap();
    assert!(matches!(
        s.next().await,
        Some(Ok(CompletionChunk::Token { .. }))
    ));
    kill9(first_pid);
    let item = tokio::time::timeout(Duration::from_secs(1), s.next())
        .await
        .expect("error within 1 s");
    assert!(
        matches!(item, Some(Err(Error::RunnerExited(_)))),
        "{item:?}"
    );
    drop(s);

    let lease = sched.acquire(req).await.unwrap();
    assert_ne!(lease.pid(), first_pid, "a fresh runner was loaded");
    assert_eq!(text_of(lease).await.unwrap(), "a b c d e f");
    assert!(gone(first_pid));
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1, "the dead runner is no longer listed");
    sched.shutdown().await;
}

#[tokio::test]
async fn a_dropped_stream_frees_the_only_slot_promptly() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let req = env.request(
        "m",
        &["--tokens", "a b c d e f g h", "--token-delay-ms", "250"],
    );
    let lease = sched.acquire(req.clone()).await.unwrap();
    let mut s = lease.into_completion(&prompt()).await.unwrap();
    assert!(s.next().await.is_some());

    // With num_parallel 1 a second request waits while the first stream lives...
    let waiting =
        tokio::time::timeout(Duration::from_millis(300), sched.acquire(req.clone())).await;
    assert!(waiting.is_err(), "the single slot is taken");

    // ...and starts promptly once the client goes away (lease released, runner slot freed).
    drop(s);
    let t = Instant::now();
    let lease = sched.acquire(req).await.unwrap();
    let mut s = lease.into_completion(&prompt()).await.unwrap();
    assert!(matches!(
        s.next().await,
        Some(Ok(CompletionChunk::Token { .. }))
    ));
    assert!(
        t.elapsed() < Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );
    drop(s);
    sched.shutdown().await;
}

#[tokio::test]
async fn parallel_slots_bound_concurrent_leases() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.num_parallel = 2;
    let sched = Scheduler::new(cfg);
    let req = env.request("m", &[]);
    let a = sched.acquire(req.clone()).await.unwrap();
    let b = sched.acquire(req.clone()).await.unwrap();
    assert_eq!(a.pid(), b.pid());
    assert_eq!(
        a.options().parallel,
        2,
        "parallel 0 resolves to num_parallel"
    );
    let third = tokio::time::timeout(Duration::from_millis(300), sched.acquire(req.clone())).await;
    assert!(third.is_err(), "a third lease waits");
    let pending = {
        let sched = sched.clone();
        let req = req.clone();
        tokio::spawn(async move { sched.acquire(req).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());
    drop(a);
    let c = tokio::time::timeout(Duration::from_secs(1), pending)
        .await
        .expect("granted once a slot frees")
        .unwrap()
        .unwrap();
    assert_eq!(c.pid(), b.pid());
    drop((b, c));
    sched.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_is_bounded_for_loaded_models_too() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.max_queue = 512;
    cfg.num_parallel = 4;
    let sched = Scheduler::new(cfg);
    let req = env.request("m", &["--tokens", "x y", "--parallel", "4"]);
    // Load the model first, so the overflow happens against a loaded model.
    drop(sched.acquire(req.clone()).await.unwrap());

    let (gate_tx, gate) = watch::channel(false);
    let (full_tx, mut full_rx) = mpsc::unbounded_channel();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..600 {
        let (sched, req, mut gate, full_tx) =
            (sched.clone(), req.clone(), gate.clone(), full_tx.clone());
        tasks.push(tokio::spawn(async move {
            match sched.acquire(req).await {
                Err(Error::QueueFull) => {
                    let _ = full_tx.send(started.elapsed());
                    None
                }
                Err(e) => panic!("unexpected {e:?}"),
                Ok(lease) => {
                    // Hold the slot until every request has been admitted or refused.
                    let _ = gate.wait_for(|open| *open).await;
                    Some(text_of(lease).await.unwrap())
                }
            }
        }));
    }
    drop(full_tx);
    let mut refused = Vec::new();
    while refused.len() < 88 {
        let t = tokio::time::timeout(Duration::from_secs(5), full_rx.recv())
            .await
            .expect("88 refusals")
            .unwrap();
        refused.push(t);
    }
    // No further refusals while the 512 admitted requests are all pending or active.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), full_rx.recv())
            .await
            .is_err(),
        "exactly 88 refused"
    );
    let slowest = refused.iter().max().unwrap();
    eprintln!("88 refusals, the last {slowest:?} after the first acquire");
    assert!(
        *slowest < Duration::from_secs(2),
        "refusals are immediate: {slowest:?}"
    );
    gate_tx.send(true).unwrap();
    let mut completed = 0;
    for t in tasks {
        if let Some(text) = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .unwrap()
            .unwrap()
        {
            assert_eq!(text, "x y");
            completed += 1;
        }
    }
    assert_eq!(completed, 512);
    eprintln!("512 admitted requests served in {:?}", started.elapsed());
    // All slots and admission permits came back: a new request is admitted and served.
    let lease = sched.acquire(req).await.unwrap();
    assert_eq!(text_of(lease).await.unwrap(), "x y");
    sched.shutdown().await;
}

#[tokio::test]
async fn keep_alive_zero_unloads_when_the_lease_drops() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let mut req = env.request("m", &[]);
    req.keep_alive = Some(KeepAlive::For(Duration::ZERO));
    let lease = sched.acquire(req).await.unwrap();
    let pid = lease.pid();
    assert_eq!(sched.ps().await.len(), 1);
    drop(lease);
    assert!(
        wait_gone(pid, Duration::from_secs(2)).await,
        "unloaded and reaped"
    );
    assert!(sched.ps().await.is_empty());
    sched.shutdown().await;
}

#[tokio::test]
async fn expires_at_follows_the_latest_keep_alive() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let mut ten_min = env.request("a", &[]);
    ten_min.keep_alive = Some(KeepAlive::For(Duration::from_secs(600)));
    let mut forever = env.request("b", &[]);
    forever.keep_alive = Some(KeepAlive::Forever);
    drop(sched.acquire(ten_min.clone()).await.unwrap());
    drop(sched.acquire(forever).await.unwrap());

    let ps = sched.ps().await;
    assert_eq!(ps.len(), 2);
    assert_eq!(ps[0].name, "b:latest", "forever sorts first");
    assert_eq!(ps[0].expires_at, None);
    assert_eq!(ps[1].name, "a:latest");
    let left = ps[1]
        .expires_at
        .unwrap()
        .duration_since(SystemTime::now())
        .unwrap();
    assert!(
        left > Duration::from_secs(590) && left <= Duration::from_secs(600),
        "{left:?}"
    );
    assert_eq!(ps[1].context_length, 256);
    assert_eq!(ps[1].digest, "digest-a");

    // A later request's keep-alive replaces the timer: 300 ms, and it really fires.
    let mut short = ten_min;
    short.keep_alive = Some(KeepAlive::For(Duration::from_millis(300)));
    let lease = sched.acquire(short).await.unwrap();
    let pid = lease.pid();
    drop(lease);
    let ps = sched.ps().await;
    assert_eq!(ps[0].name, "b:latest");
    let left = ps[1].expires_at.unwrap().duration_since(SystemTime::now());
    assert!(left.is_ok_and(|d| d <= Duration::from_millis(300)));
    assert!(wait_gone(pid, Duration::from_secs(3)).await);
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].name, "b:latest");
    sched.shutdown().await;
}

#[tokio::test]
async fn max_loaded_evicts_the_idle_runner() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.max_loaded_models = 1;
    let sched = Scheduler::new(cfg);
    let a = sched.acquire(env.request("a", &[])).await.unwrap();
    let a_pid = a.pid();
    // B waits while A is busy, then A is evicted for it.
    let b = {
        let sched = sched.clone();
        let req = env.request("b", &[]);
        tokio::spawn(async move { sched.acquire(req).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!b.is_finished(), "B waits for A's lease");
    assert!(!gone(a_pid));
    drop(a);
    let b = b.await.unwrap().unwrap();
    assert!(gone(a_pid), "A was stopped before B loaded");
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].pid, b.pid());
    drop(b);
    sched.shutdown().await;
}

#[tokio::test]
async fn changed_load_options_reload_the_model() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let req = env.request("m", &[]);
    let first = sched.acquire(req.clone()).await.unwrap().pid();
    let same = sched.acquire(req.clone()).await.unwrap().pid();
    assert_eq!(first, same, "equal options reuse the runner");
    let mut bigger = req;
    bigger.options.ctx_size = 512;
    let lease = sched.acquire(bigger).await.unwrap();
    assert_ne!(lease.pid(), first);
    assert_eq!(lease.info().n_ctx, 512);
    assert!(
        gone(first),
        "the old runner was replaced, not kept alongside"
    );
    assert_eq!(sched.ps().await.len(), 1);
    drop(lease);
    sched.shutdown().await;
}

#[tokio::test]
async fn a_failed_load_fails_every_request_waiting_on_it() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let req = env.request("m", &["--slow-load", "0.3", "--fail-load", "ModelLoad"]);
    let results = futures_util::future::join_all((0..3).map(|_| sched.acquire(req.clone()))).await;
    for r in results {
        match r {
            // Every waiter gets the runner's typed error, naming the model that failed.
            Err(Error::Load { model, source }) => {
                assert_eq!(model, "m:latest");
                assert!(
                    matches!(&*source, Error::Runner(e) if e.kind == ErrorKind::ModelLoad),
                    "{source:?}"
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(sched.ps().await.is_empty());
    assert!(children_mentioning(env.dir.path()).is_empty());
    sched.shutdown().await;
}

#[tokio::test]
async fn unload_stops_an_idle_runner() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let req = env.request("m", &[]);
    let pid = sched.acquire(req.clone()).await.unwrap().pid();
    assert!(sched.unload(&req.options.model).await);
    assert!(gone(pid), "unload returns after the process is gone");
    assert!(!sched.unload(&req.options.model).await);
    assert!(!sched.unload(Path::new("/nope")).await);
    sched.shutdown().await;
}

#[tokio::test]
async fn shutdown_leaves_no_child_processes() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.stop_grace = Duration::from_millis(300);
    let sched = Arc::new(Scheduler::new(cfg));
    let stubborn = sched
        .acquire(env.request("a", &["--ignore-sigterm"]))
        .await
        .unwrap();
    let polite = sched.acquire(env.request("b", &[])).await.unwrap();
    let pids = [stubborn.pid(), polite.pid()];
    drop(polite);
    // A third model is mid-load when shutdown starts.
    let loading = {
        let sched = sched.clone();
        let req = env.request("c", &["--hang-load"]);
        tokio::spawn(async move { sched.acquire(req).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(children_mentioning(env.dir.path()).len(), 3);

    let t = Instant::now();
    sched.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(3));
    for pid in pids {
        assert!(gone(pid), "{pid} reaped");
    }
    assert!(children_mentioning(env.dir.path()).is_empty());
    assert!(
        loading.await.unwrap().is_err(),
        "the pending load was failed"
    );
    assert!(sched.acquire(env.request("b", &[])).await.is_err());
    drop(stubborn);
}

#[tokio::test]
async fn the_memory_budget_evicts_idle_runners() {
    let env = Env::new();
    let mut cfg = env.config();
    // A fake runner reports its model file size + 1 MiB; with B's 600 KiB estimate the two do
    // not fit in 1.5 MiB.
    cfg.memory_budget = Some(1536 * 1024);
    let sched = Scheduler::new(cfg);
    let a = sched.acquire(env.request("a", &[])).await.unwrap();
    let a_pid = a.pid();
    assert!(
        sched.ps().await[0].size > 1024 * 1024,
        "size is the runner's report"
    );
    drop(a);
    let mut b = env.request("b", &[]);
    b.memory = 600 * 1024;
    let b = sched.acquire(b).await.unwrap();
    assert!(gone(a_pid), "A made room for B");
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].pid, b.pid());
    drop(b);
    sched.shutdown().await;
}
