//! Liveness of a ready runner: the deadlines that turn "stopped answering" into a dead runner.
//!
//! A runner can hang without exiting (SIGSTOP, a wedged GPU call, a deadlock in its engine). Two
//! independent checks catch it, and both end the same way: the runner is marked faulty with a
//! reason, its process group gets SIGKILL, and the exit watcher publishes the reason as the exit
//! message, so every stream bound to it ends with that `{"error":…}` and the scheduler forgets it.
//! - The progress deadline: a completion that gets no line from the runner (and no status line
//!   at its start) for `progress_timeout` is stuck. The bound is per chunk, so a long generation
//!   is fine; it must exceed the longest legitimate silence, one prefill ubatch of the slowest
//!   model, which is why the default is generous (as Ollama's load timeout is).
//! - The health probe: every `probe_interval` the runner's `/health` must answer within
//!   `probe_timeout` (Ollama pings its runners the same way). It catches a frozen process even
//!   when no request is in flight, and does so long before the progress deadline.
//!
//! Invariant: the probe task holds only a weak reference, so it never keeps a runner alive; it
//! ends when the runner exits, is being stopped, or its last handle drops.

use super::supervisor::Inner;
use std::sync::Weak;
use std::time::Duration;
use tokio::time::{sleep, timeout};

/// Deadlines for a ready runner; `None` switches a check off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Liveness {
    /// Longest silence within a completion (`HERD_PROGRESS_TIMEOUT`).
    pub progress_timeout: Option<Duration>,
    /// Time between health probes (`HERD_HEALTH_INTERVAL`).
    pub probe_interval: Option<Duration>,
    /// How long one probe may take (`HERD_HEALTH_TIMEOUT`).
    pub probe_timeout: Duration,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            progress_timeout: Some(Duration::from_secs(300)),
            probe_interval: Some(Duration::from_secs(10)),
            probe_timeout: Duration::from_secs(30),
        }
    }
}

/// What a failed probe says; `None` when the runner answered (whatever its state).
pub(super) fn probe_failure<T, E: std::fmt::Display>(
    outcome: Result<Result<T, E>, tokio::time::error::Elapsed>,
    probe_timeout: Duration,
) -> Option<String> {
    match outcome {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(format!("its health check failed: {e}")),
        Err(_) => Some(format!(
            "no answer to a health check within {}",
            secs(probe_timeout)
        )),
    }
}

/// The reason recorded when a completion's progress deadline passes.
pub(super) fn no_progress(progress_timeout: Duration) -> String {
    format!(
        "no output from it for {} during a request",
        secs(progress_timeout)
    )
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Probes `inner`'s runner until it exits, is stopped or dropped; kills it on the first
/// failed probe.
pub(super) async fn probe(inner: Weak<Inner>, interval: Duration, probe_timeout: Duration) {
    loop {
        let Some(exit) = inner.upgrade().map(|i| i.exit.clone()) else {
            return;
        };
        let mut exit = exit;
        tokio::select! {
            _ = exit.wait_for(Option::is_some) => return,
            _ = sleep(interval) => {}
        }
        let Some(runner) = inner.upgrade() else {
            return;
        };
        if runner.exit.borrow().is_some() || runner.is_stopping() {
            return;
        }
        let outcome = timeout(probe_timeout, runner.client.health()).await;
        if runner.exit.borrow().is_some() || runner.is_stopping() {
            return;
        }
        if let Some(reason) = probe_failure(outcome, probe_timeout) {
            runner.mark_faulty(reason);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn probe_outcomes() {
        let t = Duration::from_millis(1500);
        assert_eq!(probe_failure::<(), String>(Ok(Ok(())), t), None);
        assert_eq!(
            probe_failure::<(), String>(Ok(Err("refused".into())), t).as_deref(),
            Some("its health check failed: refused")
        );
        let elapsed = timeout(Duration::ZERO, std::future::pending::<Result<(), String>>())
            .await
            .unwrap_err();
        assert_eq!(
            probe_failure::<(), String>(Err(elapsed), t).as_deref(),
            Some("no answer to a health check within 1.5s")
        );
        assert_eq!(
            no_progress(Duration::from_secs(300)),
            "no output from it for 300.0s during a request"
        );
    }
}
