//! Scheduler policy and runner-death metrics against the fake runner: `HERD_PIN` (a pinned
//! model is never evicted, never expires, survives unload; a model that cannot fit beside it is
//! refused with 503), `HERD_MAX_KEEP_ALIVE` (forever is capped; the model unloads), and
//! `herd_runner_restarts_total` by cause (a signal, an exit, a liveness kill; a stop herd asked
//! for is no restart). Needs `cargo build -p fake-runner` first.

#[path = "scheduler_support/mod.rs"]
mod support;

use futures_util::StreamExt;
use runner_protocol::{CompletionRequest, Prompt};
use server::config::Pins;
use server::error::Error;
use server::scheduler::{KeepAlive, Scheduler};
use std::time::{Duration, Instant, SystemTime};
use support::*;

/// The value of the one sample line starting with `series` (name plus labels), if any.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn wait_for(what: &str, within: Duration, mut ok: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + within;
    while !ok().await {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn pinned_model_stays_and_a_model_that_cannot_fit_is_refused() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.max_loaded_models = 1;
    cfg.pins = server::config::Pins(vec![server::store::ModelName::parse("p").unwrap()]);
    let sched = Scheduler::new(cfg);
    // keep_alive 0 would unload an ordinary model as soon as the lease drops.
    let p = env.request_with(
        "p",
        &["--tokens", "a"],
        Some(KeepAlive::For(Duration::ZERO)),
    );
    let lease = sched.acquire(p.clone()).await.unwrap();
    let pid = lease.pid();
    drop(lease);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1, "pinned model still loaded");
    assert_eq!(ps[0].expires_at, None, "a pinned model never expires");

    // Another model cannot evict it: refused at once, not queued forever.
    let t = Instant::now();
    let err = sched
        .acquire(env.request_with("q", &["--tokens", "b"], None))
        .await
        .unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(matches!(err, Error::NoRoom(_)), "{err:?}");
    assert_eq!(err.status(), 503);
    assert!(err.to_string().contains("HERD_PIN=p:latest"), "{err}");

    // An unload request leaves it loaded too.
    assert!(sched.unload(&p.options.model).await);
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].pid, pid, "same runner");
    sched.shutdown().await;
    assert!(wait_gone(pid, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn eviction_passes_over_a_pinned_model() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.max_loaded_models = 2;
    cfg.pins = Pins(vec![server::store::ModelName::parse("p:latest").unwrap()]);
    let sched = Scheduler::new(cfg);
    // p would be the first to go without the pin: its keep-alive is the shortest.
    let p = env.request_with("p", &[], Some(KeepAlive::For(Duration::from_secs(1))));
    let q = env.request_with("q", &[], Some(KeepAlive::For(Duration::from_secs(600))));
    drop(sched.acquire(p).await.unwrap());
    drop(sched.acquire(q).await.unwrap());
    drop(
        sched
            .acquire(env.request_with("r", &[], None))
            .await
            .unwrap(),
    );
    let mut names: Vec<String> = sched.ps().await.into_iter().map(|m| m.name).collect();
    names.sort();
    assert_eq!(
        names,
        ["p:latest", "r:latest"],
        "q was evicted, not the pinned p"
    );
    sched.shutdown().await;
}

#[tokio::test]
async fn max_keep_alive_caps_forever_and_the_model_unloads() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.max_keep_alive = Some(Duration::from_secs(1));
    let sched = Scheduler::new(cfg);
    let lease = sched
        .acquire(env.request_with("m", &[], Some(KeepAlive::Forever)))
        .await
        .unwrap();
    let pid = lease.pid();
    drop(lease);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let ps = sched.ps().await;
    let left = ps[0]
        .expires_at
        .expect("capped, not forever")
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    assert!(left <= Duration::from_secs(1), "{left:?}");
    wait_for(
        "the capped model to unload",
        Duration::from_secs(4),
        async || sched.ps().await.is_empty(),
    )
    .await;
    assert!(wait_gone(pid, Duration::from_secs(5)).await);
    sched.shutdown().await;
}

#[tokio::test]
async fn runner_deaths_are_counted_by_cause() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let metrics = sched.metrics().clone();
    let killed = env.request_with("killed", &["--tokens", "a"], None);
    let pid = sched.acquire(killed.clone()).await.unwrap().pid();
    kill9(pid);
    wait_for(
        "the killed runner to be forgotten",
        Duration::from_secs(5),
        async || sched.ps().await.is_empty(),
    )
    .await;
    // A runner that exits on its own with a status code mid-stream.
    let crashes = env.request_with(
        "crashes",
        &["--tokens", "a b c", "--crash-after", "1"],
        None,
    );
    let lease = sched.acquire(crashes).await.unwrap();
    let req = CompletionRequest {
        prompt: Prompt::Text("hi".into()),
        ..Default::default()
    };
    let mut s = lease.into_completion(&req).await.unwrap();
    while let Some(item) = s.next().await {
        if item.is_err() {
            break;
        }
    }
    drop(s);
    wait_for(
        "the crashed runner to be forgotten",
        Duration::from_secs(5),
        async || sched.ps().await.is_empty(),
    )
    .await;
    // A runner that dies while loading.
    let exits = env.request_with("exits", &["--exit-at-load", "3", "--slow-load", "0"], None);
    let exits_ready = sched.acquire(exits).await;
    // A stop herd asks for is not a restart.
    let stopped = env.request_with("stopped", &[], None);
    drop(sched.acquire(stopped.clone()).await.unwrap());
    assert!(sched.unload(&stopped.options.model).await);

    let text = metrics.render();
    assert_eq!(
        sample(
            &text,
            r#"herd_runner_restarts_total{cause="signal",model="killed:latest"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"herd_runner_restarts_total{cause="exit",model="crashes:latest"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            r#"herd_model_load_seconds_count{model="killed:latest"}"#
        ),
        Some(1.0)
    );
    assert!(!text.contains(r#"cause="stopped""#), "{text}");
    match exits_ready {
        // Died before it was ready: a load failure, not a restart of a serving runner.
        Err(_) => assert_eq!(
            sample(
                &text,
                r#"herd_model_load_failures_total{model="exits:latest"}"#
            ),
            Some(1.0),
            "{text}"
        ),
        Ok(_) => panic!("a runner that exits at load cannot be ready"),
    }
    sched.shutdown().await;
}

#[tokio::test]
async fn a_runner_killed_as_unresponsive_counts_as_such() {
    let env = Env::new();
    let mut cfg = env.config();
    cfg.liveness.progress_timeout = Some(Duration::from_millis(500));
    let sched = Scheduler::new(cfg);
    let wedged = env.request_with("wedged", &["--tokens", "a b c", "--wedge-after", "1"], None);
    let lease = sched.acquire(wedged).await.unwrap();
    let req = CompletionRequest {
        prompt: Prompt::Text("hi".into()),
        ..Default::default()
    };
    let mut s = lease.into_completion(&req).await.unwrap();
    let mut failed = false;
    while let Some(item) = s.next().await {
        failed |= item.is_err();
    }
    assert!(failed, "the stalled stream ends with an error");
    drop(s);
    wait_for(
        "the stuck runner to be forgotten",
        Duration::from_secs(5),
        async || sched.ps().await.is_empty(),
    )
    .await;
    let text = sched.metrics().render();
    assert_eq!(
        sample(
            &text,
            r#"herd_runner_restarts_total{cause="unresponsive",model="wedged:latest"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        !text.contains(r#"cause="signal""#),
        "the kill was herd's: {text}"
    );
    sched.shutdown().await;
}
