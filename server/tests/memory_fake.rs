//! Eviction by memory against the fake runner (`--memory`/`--vram` make it report what a real
//! runner would in `/info`): a runner's own report replaces the estimate for accounting (and
//! for planning the next load with the same options), the
//! idle model is evicted to make room, a model with a lease is never evicted (the new one
//! waits), a model that alone exceeds `HERD_MEMORY_BUDGET` fails with Ollama's error, and
//! `/api/ps`'s numbers are the runner's. Needs `cargo build -p fake-runner` first.

#[path = "scheduler_support/mod.rs"]
mod support;

use server::error::Error;
use server::scheduler::Scheduler;
use std::time::Duration;
use support::*;

#[tokio::test]
async fn eviction_by_reported_memory_spares_busy_models_and_refuses_the_too_big() {
    let env = Env::new();
    let mut cfg = env.config();
    // Every request estimates 1000 bytes (scheduler_support); a and b report more once loaded.
    cfg.memory_budget = Some(2500);
    let sched = Scheduler::new(cfg);

    let a = env.request(
        "a",
        &["--tokens", "x", "--memory", "2000", "--vram", "1500"],
    );
    let lease_a = sched.acquire(a.clone()).await.unwrap();
    let pid_a = lease_a.pid();
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_eq!(
        (ps[0].size, ps[0].size_vram),
        (2000, 1500),
        "the runner's report"
    );

    // By the estimates a (1000) and b (1000) fit 2500 together; by a's report (2000) they do
    // not. a is leased, so b waits instead of evicting it.
    let b = env.request("b", &["--tokens", "y", "--memory", "900"]);
    let sched2 = sched.clone();
    let waiting = tokio::spawn(async move { sched2.acquire(b).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "b must wait for a's lease");
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1, "a busy model is never evicted: {ps:?}");

    // Once a is idle it is the one that goes.
    drop(lease_a);
    let lease_b = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("b loads once a is idle")
        .unwrap()
        .unwrap();
    assert!(
        wait_gone(pid_a, Duration::from_secs(5)).await,
        "a was stopped"
    );
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0].name, "b:latest");
    assert_eq!((ps[0].size, ps[0].size_vram), (900, 0));

    // c fits beside b (900 + 1000 ≤ 2500): no eviction.
    drop(lease_b);
    let lease_c = sched
        .acquire(env.request("c", &["--tokens", "z", "--memory", "1000"]))
        .await
        .unwrap();
    assert_eq!(sched.ps().await.len(), 2);
    drop(lease_c);

    // A model whose estimate alone exceeds the budget fails at once with Ollama's error, and
    // nothing loaded is evicted for it.
    let mut big = env.request("big", &["--tokens", "w"]);
    big.memory = 3 * 1024 * 1024 * 1024;
    let err = sched.acquire(big).await.unwrap_err();
    assert!(matches!(err, Error::InsufficientMemory { .. }), "{err:?}");
    assert_eq!(err.status(), 500);
    assert_eq!(
        err.to_string(),
        "model requires more system memory (3.0 GiB) than is available (2.4 KiB)"
    );
    assert_eq!(sched.ps().await.len(), 2, "nothing was evicted for it");
    // The scheduler still serves.
    let again = sched
        .acquire(env.request("c", &["--tokens", "z", "--memory", "1000"]))
        .await
        .unwrap();
    drop(again);

    // a again: planned with its measured 2000, not the estimate of 1000, so both idle models
    // go (by the estimate, evicting one would have been enough).
    let lease_a = sched.acquire(a).await.unwrap();
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1, "{ps:?}");
    assert_eq!(ps[0].name, "a:latest");
    drop(lease_a);
    sched.shutdown().await;
}
