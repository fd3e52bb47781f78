//! The actor's answer to a load that failed: every request waiting on it gets its error, except
//! that a load out of memory beside other models is tried once more with them unloaded
//! (Ollama's `oomRetryAttempted`; `policy::retry_after_oom`, `policy::plan_after_oom`).

use super::{copy_error, Actor, Entry, Pending};
use crate::error::Error;
use crate::scheduler::policy;
use std::collections::VecDeque;
use tokio::time::Instant;

impl Actor {
    /// `e` (already out of `entries`) failed to load with `err`.
    pub(super) fn load_failed(&mut self, e: Entry, err: Error) {
        let waits_on = |p: &Pending| {
            p.req.options.model == e.options.model
                && !policy::needs_reload(&e.options, &p.req.options)
        };
        // The requests waiting on it keep their places and are served by the retry.
        let retried = self.queue.iter().any(|p| waits_on(p) && p.oom_retried);
        if is_out_of_memory(&err) && policy::retry_after_oom(retried, &self.views(Instant::now())) {
            tracing::warn!(model = %e.name, error = %err, "model load ran out of memory; unloading the other models and retrying once");
            for p in self.queue.iter_mut().filter(|p| waits_on(p)) {
                p.oom_retried = true;
            }
            return;
        }
        // Everyone waiting on this load would only repeat it: they all get its error.
        let (waiting, rest): (VecDeque<Pending>, VecDeque<Pending>) =
            std::mem::take(&mut self.queue)
                .into_iter()
                .partition(waits_on);
        self.queue = rest;
        let mut waiting = waiting.into_iter();
        if let Some(first) = waiting.next() {
            for p in waiting {
                let _ = p.reply.send(Err(copy_error(&err)));
            }
            let _ = first.reply.send(Err(err));
        }
    }
}

/// A load that failed because the runner could not allocate memory (its typed report).
fn is_out_of_memory(err: &Error) -> bool {
    match err {
        Error::Load { source, .. } => is_out_of_memory(source),
        Error::Runner(e) => e.kind == runner_protocol::ErrorKind::OutOfMemory,
        _ => false,
    }
}
