//! Runner liveness and races against the fake runner (issue 22, items 1 and 2): a runner that
//! stops answering is detected and killed, and every request bound to a runner that dies is
//! re-admitted or failed at once. Needs `cargo build -p fake-runner` first.

#[path = "scheduler_support/mod.rs"]
mod support;

use futures_util::StreamExt;
use runner_protocol::{CompletionChunk, CompletionRequest};
use server::error::Error;
use server::runner::Liveness;
use server::scheduler::{ModelRequest, Scheduler, SchedulerConfig};
use std::time::{Duration, Instant};
use support::*;

/// Short liveness deadlines: probes every 100 ms answered within 500 ms, and `progress`.
fn quick(env: &Env, progress: Duration) -> SchedulerConfig {
    let mut c = env.config();
    c.liveness = Liveness {
        progress_timeout: Some(progress),
        probe_interval: Some(Duration::from_millis(100)),
        probe_timeout: Duration::from_millis(500),
    };
    c
}

/// Runs one completion to its end: `Ok(text)` on `done`, else the error that ended it.
async fn run_to_end(sched: &Scheduler, req: ModelRequest) -> Result<String, Error> {
    let lease = sched.acquire(req).await?;
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

fn signal(pid: u32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
}

/// Reads a stream to its end: the error that ended it, or `None` if it ended with `done`.
async fn error_of(s: &mut server::runner::CompletionStream) -> Option<Error> {
    while let Some(item) = s.next().await {
        match item {
            Err(e) => return Some(e),
            Ok(CompletionChunk::Done { .. }) => return None,
            Ok(_) => {}
        }
    }
    None
}

/// Item 2, deterministically: the runner cuts the streaming request's connection mid-line and
/// its engine is dead, while the process lives. Before, the waiting request was granted that
/// runner as soon as the first one's lease dropped and hung forever; now the runner is killed
/// and the waiting request runs on a fresh one.
#[tokio::test]
async fn a_broken_stream_hands_the_waiting_request_to_a_fresh_runner() {
    let env = Env::new();
    let sched = Scheduler::new(env.config());
    let req = env.request(
        "m",
        &[
            "--tokens",
            "a b c d e f",
            "--token-delay-ms",
            "50",
            "--break-after",
            "3",
        ],
    );
    let lease = sched.acquire(req.clone()).await.unwrap();
    let pid = lease.pid();
    let mut a = lease.into_completion(&prompt()).await.unwrap();
    let b = tokio::spawn({
        let (sched, req) = (sched.clone(), req.clone());
        async move {
            let lease = sched.acquire(req).await?;
            let pid = lease.pid();
            let mut s = lease
                .into_completion(&CompletionRequest {
                    num_predict: 2,
                    ..prompt()
                })
                .await?;
            match error_of(&mut s).await {
                None => Ok(pid),
                Some(e) => Err(e),
            }
        }
    });
    let t = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(3), error_of(&mut a))
        .await
        .expect("the cut stream ends");
    println!("cut stream ended {:?} after it started", t.elapsed());
    assert!(matches!(e, Some(Error::RunnerExited(_))), "{e:?}");
    drop(a);
    let b_pid = tokio::time::timeout(Duration::from_secs(3), b)
        .await
        .expect("the waiting request was not stranded on the broken runner")
        .unwrap()
        .unwrap();
    assert_ne!(b_pid, pid, "served by a fresh runner");
    assert!(
        wait_gone(pid, Duration::from_secs(2)).await,
        "broken runner reaped"
    );
    sched.shutdown().await;
}

/// Item 1: a SIGSTOPped runner (mid-stream, with a request waiting for its slot) fails its
/// health probe; it is killed, its stream ends with an error that says why, and the waiting
/// request runs on a fresh runner. Before, both hung forever.
#[tokio::test]
async fn a_stopped_runner_is_detected_killed_and_replaced() {
    let env = Env::new();
    // The progress deadline is far away: the probe is what must find it.
    let sched = Scheduler::new(quick(&env, Duration::from_secs(30)));
    let req = env.request(
        "m",
        &["--tokens", "a b c d e f g h", "--token-delay-ms", "100"],
    );
    let lease = sched.acquire(req.clone()).await.unwrap();
    let pid = lease.pid();
    let mut a = lease.into_completion(&prompt()).await.unwrap();
    assert!(matches!(
        a.next().await,
        Some(Ok(CompletionChunk::Token { .. }))
    ));
    let b = tokio::spawn({
        let (sched, req) = (sched.clone(), req.clone());
        async move { run_to_end(&sched, req).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    signal(pid, nix::sys::signal::Signal::SIGSTOP);
    let t = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(5), error_of(&mut a))
        .await
        .expect("the stopped runner's stream ends");
    let detected = t.elapsed();
    println!("SIGSTOPped runner detected in {detected:?}");
    match e {
        Some(Error::RunnerExited(m)) => assert!(
            m.contains("stopped responding") && m.contains("health check"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(detected < Duration::from_secs(2), "{detected:?}");
    drop(a);
    let out = tokio::time::timeout(Duration::from_secs(5), b)
        .await
        .expect("the waiting request is served")
        .unwrap();
    assert_eq!(out.unwrap(), "a b c d e f g h");
    assert!(
        wait_gone(pid, Duration::from_secs(2)).await,
        "stopped runner killed and reaped"
    );
    let ps = sched.ps().await;
    assert_eq!(ps.len(), 1);
    assert_ne!(ps[0].pid, pid);
    sched.shutdown().await;
}

/// Item 1 with no request in flight: an idle runner that stops answering is found by the probe
/// and forgotten, so the next request loads a fresh one instead of waiting on it forever.
#[tokio::test]
async fn an_idle_stopped_runner_is_replaced_on_the_next_request() {
    let env = Env::new();
    let sched = Scheduler::new(quick(&env, Duration::from_secs(30)));
    let req = env.request("m", &["--tokens", "x y"]);
    let pid = sched.acquire(req.clone()).await.unwrap().pid();
    signal(pid, nix::sys::signal::Signal::SIGSTOP);
    assert!(
        wait_gone(pid, Duration::from_secs(3)).await,
        "stopped runner killed"
    );
    let t = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(5), run_to_end(&sched, req))
        .await
        .expect("next request served");
    assert_eq!(out.unwrap(), "x y");
    println!("next request after an idle SIGSTOP took {:?}", t.elapsed());
    sched.shutdown().await;
}

/// Item 1: a runner whose engine hangs while its HTTP side still answers `/health` (a wedged GPU
/// call) is caught by the progress deadline.
#[tokio::test]
async fn a_wedged_engine_hits_the_progress_deadline() {
    let env = Env::new();
    let progress = Duration::from_millis(800);
    let sched = Scheduler::new(quick(&env, progress));
    let req = env.request("m", &["--tokens", "a b c d e f", "--wedge-after", "2"]);
    let lease = sched.acquire(req.clone()).await.unwrap();
    let pid = lease.pid();
    let mut a = lease.into_completion(&prompt()).await.unwrap();
    let t = Instant::now();
    let e = tokio::time::timeout(Duration::from_secs(5), error_of(&mut a))
        .await
        .expect("the wedged stream ends");
    let took = t.elapsed();
    println!("wedged engine detected {took:?} after the request started");
    match e {
        Some(Error::RunnerExited(m)) => assert!(m.contains("no output from it for 0.8s"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(
        took >= progress && took < Duration::from_secs(2),
        "{took:?}"
    );
    drop(a);
    assert!(wait_gone(pid, Duration::from_secs(2)).await);
    // The next request reloads (the fresh runner wedges after 2 tokens as well: ask for 2).
    let lease = sched.acquire(req).await.unwrap();
    assert_ne!(lease.pid(), pid);
    let mut s = lease
        .into_completion(&CompletionRequest {
            num_predict: 1,
            ..prompt()
        })
        .await
        .unwrap();
    assert!(error_of(&mut s).await.is_none());
    sched.shutdown().await;
}

/// The deadlines do not kill a runner that is slow but alive: tokens 300 ms apart under an
/// 800 ms progress deadline, and an idle runner probed every 100 ms, keep their process.
#[tokio::test]
async fn slow_but_alive_runners_are_left_alone() {
    let env = Env::new();
    let sched = Scheduler::new(quick(&env, Duration::from_millis(800)));
    let req = env.request("m", &["--tokens", "a b c d", "--token-delay-ms", "300"]);
    let lease = sched.acquire(req.clone()).await.unwrap();
    let pid = lease.pid();
    let mut s = lease.into_completion(&prompt()).await.unwrap();
    assert!(error_of(&mut s).await.is_none());
    drop(s);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let lease = sched.acquire(req).await.unwrap();
    assert_eq!(lease.pid(), pid, "the same runner serves the next request");
    drop(lease);
    sched.shutdown().await;
}
