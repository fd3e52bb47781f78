//! A load that runs out of memory beside other loaded models (Ollama's sched_test.go
//! `TestSchedLoadCrashTriggersEvictAllAndRetry` and its fail-fast cases): the other models are
//! unloaded and the load is tried once more; alone, or a second time, the error is final.
//! The fake runner's `--hold FILE` stands for the memory a loaded model holds and
//! `--oom-while FILE` for a model that cannot load while that memory is taken.
//! Needs `cargo build -p fake-runner` first.

#[path = "scheduler_support/mod.rs"]
mod support;

use runner_protocol::ErrorKind;
use server::error::Error;
use server::scheduler::Scheduler;
use std::time::Duration;
use support::*;

fn is_oom(r: &Result<server::scheduler::Lease, Error>) -> bool {
    matches!(r, Err(Error::Load { source, .. })
        if matches!(&**source, Error::Runner(e) if e.kind == ErrorKind::OutOfMemory))
}

#[tokio::test]
async fn out_of_memory_beside_an_idle_model_unloads_it_and_retries() {
    let env = Env::new();
    let held = env.models.path().join("a.held");
    let held_s = held.to_str().unwrap();
    let sched = Scheduler::new(env.config());
    let a = sched
        .acquire(env.request("a", &["--hold", held_s]))
        .await
        .unwrap();
    let a_pid = a.pid();
    drop(a);
    assert!(held.exists(), "A holds its memory while loaded");

    let b = sched
        .acquire(env.request("b", &["--oom-while", held_s]))
        .await
        .expect("B loads on the retry, once A is gone");
    assert!(gone(a_pid), "A was unloaded for the retry");
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].name, "b:latest");
    assert_eq!(ps[0].pid, b.pid());
    drop(b);
    sched.shutdown().await;
}

#[tokio::test]
async fn the_retry_waits_for_a_busy_model_to_finish() {
    let env = Env::new();
    let held = env.models.path().join("a.held");
    let held_s = held.to_str().unwrap();
    let sched = Scheduler::new(env.config());
    let a = sched
        .acquire(env.request("a", &["--hold", held_s]))
        .await
        .unwrap();
    let a_pid = a.pid();
    let b = {
        let sched = sched.clone();
        let req = env.request("b", &["--oom-while", held_s]);
        tokio::spawn(async move { sched.acquire(req).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!b.is_finished(), "B's retry waits for A's request");
    assert!(!gone(a_pid));
    drop(a);
    let b = b.await.unwrap().expect("B loads once A finished and went");
    assert!(gone(a_pid));
    assert_eq!(sched.ps().await.len(), 1);
    drop(b);
    sched.shutdown().await;
}

#[tokio::test]
async fn out_of_memory_is_final_alone_or_the_second_time() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    // Alone: nothing to unload, the error is final.
    let oom = env.request("b", &["--fail-load", "OutOfMemory"]);
    assert!(is_oom(&sched.acquire(oom.clone()).await));

    // Beside another model: that one is unloaded, the retry fails too, and its error is final.
    let a = sched.acquire(env.request("a", &[])).await.unwrap();
    let a_pid = a.pid();
    drop(a);
    assert!(is_oom(&sched.acquire(oom.clone()).await));
    assert!(gone(a_pid), "A was unloaded for the retry");
    assert!(sched.ps().await.is_empty());

    // Other load failures are final even beside another model, which stays.
    let a = sched.acquire(env.request("a", &[])).await.unwrap();
    let a_pid = a.pid();
    drop(a);
    let bad = env.request("c", &["--fail-load", "ModelLoad"]);
    assert!(matches!(sched.acquire(bad).await, Err(Error::Load { .. })));
    assert!(
        !gone(a_pid),
        "a model that failed otherwise unloads nothing"
    );
    assert_eq!(sched.ps().await.len(), 1);
    sched.shutdown().await;
}
