//! The actor's unloading: keep-alive timers (started when a runner goes idle, fired by
//! `expire`; keep-alive 0 unloads at once), explicit unloads (`Scheduler::unload`) and the
//! background stops they start. A runner always leaves `entries` before it is stopped.

use super::Actor;
use crate::runner::Runner;
use crate::scheduler::{KeepAlive, RunnerId};
use std::path::PathBuf;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;

impl Actor {
    /// Starts keep-alive timers of runners that just became idle; keep-alive 0 unloads now.
    pub(super) fn settle_idle(&mut self) {
        let now = Instant::now();
        let mut unload = Vec::new();
        for (&id, e) in self.entries.iter_mut() {
            if e.runner.is_none() || e.refcount > 0 || e.idle_deadline.is_some() {
                continue;
            }
            match e.keep_alive.duration() {
                None => {}
                Some(d) if d.is_zero() => unload.push(id),
                // A deadline past what the clock can hold never comes: no timer (forever).
                Some(d) => e.idle_deadline = now.checked_add(d),
            }
        }
        for id in unload {
            self.remove_and_stop(id);
        }
    }

    pub(super) fn expire(&mut self, now: Instant) {
        let due: Vec<RunnerId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.refcount == 0 && e.idle_deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.remove_and_stop(id);
        }
    }

    pub(super) fn remove_and_stop(&mut self, id: RunnerId) {
        if let Some(e) = self.entries.remove(&id) {
            tracing::info!(model = %e.name, "unloading model");
            if let Some(r) = e.runner {
                self.stop_in_background(r);
            }
        }
    }

    pub(super) fn stop_in_background(&mut self, runner: Runner) {
        self.tasks.spawn(async move {
            runner.stop().await;
        });
    }

    pub(super) fn unload(&mut self, model: PathBuf, reply: oneshot::Sender<bool>) {
        let ids: Vec<RunnerId> = self
            .entries
            .iter()
            .filter(|(_, e)| e.options.model == model)
            .map(|(id, _)| *id)
            .collect();
        let found = !ids.is_empty();
        // A pinned model stays loaded whoever asks (HERD_PIN is the operator's decision).
        let (pinned, ids): (Vec<RunnerId>, Vec<RunnerId>) =
            ids.into_iter().partition(|id| self.entries[id].pinned);
        if !pinned.is_empty() {
            tracing::info!(model = %model.display(), "not unloading a pinned model (HERD_PIN)");
        }
        let mut stopping = Vec::new();
        for id in ids {
            let e = self.entries.get_mut(&id).expect("listed above");
            e.keep_alive = KeepAlive::For(Duration::ZERO);
            if e.runner.is_some() && e.refcount == 0 {
                if let Some(r) = self.entries.remove(&id).and_then(|e| e.runner) {
                    stopping.push(r);
                }
            }
        }
        self.tasks.spawn(async move {
            futures_util::future::join_all(stopping.iter().map(Runner::stop)).await;
            let _ = reply.send(found);
        });
    }
}
