//! Admission: queued jobs onto free slots (prefix reuse picks the slot, `plan::pick_slot`), a
//! request's start state (its reply, sampler, pending prompt and images), and the device
//! sampler's attachment that follows from it (the module invariants in engine.rs).

use super::{fail, vision, Active, Engine};
use crate::plan;
use crate::sampling::{needs_row, Sampler};
use runner_core::jobs::{CompleteJob, Job};
use runner_core::reply::Reply;
use runner_protocol::ErrorKind;
use std::collections::VecDeque;

impl Engine {
    /// Move queued jobs onto free slots, in arrival order, while slots are free.
    pub(super) fn admit(&mut self) {
        while let Some(job) = self.queue.front() {
            let free = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.active.is_none());
            let pick = match job {
                Job::Complete(j) => {
                    plan::pick_slot(free.map(|(i, s)| (i, s.cache.as_slice())), &j.tokens)
                }
                // Embeddings wipe the slot: take the one with the least cached.
                Job::Embed(_) => free.min_by_key(|(_, s)| s.cache.len()).map(|(i, _)| i),
                Job::Shutdown => return,
            };
            let Some(i) = pick else { return };
            match self.queue.pop_front() {
                Some(Job::Complete(j)) => self.start(i, *j),
                Some(Job::Embed(j)) => {
                    let r = self.embed(i, &j.inputs);
                    let _ = j.reply.send(r);
                }
                _ => return,
            }
        }
    }

    fn start(&mut self, i: usize, mut job: CompleteJob) {
        let n_ctx_seq = self.n_ctx_seq;
        let slot = &mut self.slots[i];
        let job_media = vision::from_jobs(std::mem::take(&mut job.media));
        let mut reuse = vision::reuse_boundary(
            plan::reuse_len(&slot.cache, &job.tokens, job.req.cache_prompt),
            &job_media,
        );
        if !self.ctx.seq_rm(slot.seq, reuse as i32, -1) {
            // The memory cannot cut a partial range (recurrent models): start over.
            self.ctx.seq_rm(slot.seq, -1, -1);
            reuse = 0;
        }
        if crate::ffi::log_debug() {
            eprintln!(
                "runner-llamacpp: slot {i}: {} prompt tokens, {reuse} from the cache, {} images",
                job.tokens.len(),
                job_media.len()
            );
        }
        slot.cache.truncate(reuse);
        let Some(reply) = Reply::new(job.out, &job.req, job.tokens.len(), reuse, n_ctx_seq) else {
            return;
        };
        let limit = reply.left();
        let history = vision::text_history(&job.tokens, !job_media.is_empty());
        let sampler = Sampler::new(&job.req.sampling, &history, n_ctx_seq, job.mask);
        let media: VecDeque<vision::Media> =
            job_media.into_iter().filter(|m| m.at >= reuse).collect();
        let lp = job.req.logprobs || job.req.top_logprobs > 0;
        let why = self
            .k_dev
            .map(|k| (k, needs_row(&sampler.ask(lp, limit), k)));
        if let (Some((k, why)), true) = (why, crate::ffi::log_debug()) {
            match why {
                None => eprintln!("runner-llamacpp: slot {i}: sampling from the device's top {k}"),
                Some(r) => eprintln!("runner-llamacpp: slot {i}: sampling from whole rows ({r:?})"),
            }
        }
        let needs_row = why.is_none_or(|(_, r)| r.is_some());
        let constrained = job.req.constraint.is_some();
        let ngram = if constrained && !self.drafting.under_grammar {
            0
        } else {
            self.drafting.ngram
        };
        slot.active = Some(Active {
            reply,
            pending: job.tokens[reuse..].to_vec(),
            media,
            req: job.req,
            next: None,
            sampler,
            logits_at: None,
            needs_row,
            draft: Vec::new(),
            draft_rows: Vec::new(),
            forced: VecDeque::new(),
            forced_run: false,
            ngram,
            pace: Default::default(),
            ngram_draft: false,
        });
        self.sync_device(i);
    }

    /// Attach or detach slot `i`'s device chain to match its request (module invariants). A
    /// request that needs rows but whose chain cannot be detached fails.
    pub(super) fn sync_device(&mut self, i: usize) {
        if self.k_dev.is_none() {
            return;
        }
        let slot = &mut self.slots[i];
        let Some(a) = slot.active.as_ref() else {
            return;
        };
        let attached = self.ctx.set_device_sampling(slot.seq, !a.needs_row);
        if attached && a.needs_row {
            fail(
                slot,
                ErrorKind::Internal,
                "the device sampler could not be detached",
            );
        }
        // Not attached although allowed: the rows come whole, which is always correct.
    }
}
