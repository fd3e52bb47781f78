//! The engine thread: owns the llama context and its slots, and runs continuous batching.
//!
//! Each step builds one batch, decodes once, and samples every slot whose logits were requested:
//! from the device's top-K candidates when the request allows it (sampling/device.rs), else in
//! place on llama.cpp's logits rows and, for large steps, on a thread pool. On the CPU a step is
//! either a decode step (one token for every generating slot) or a prefill step (as much of one
//! request's pending prompt as fits in `n_batch`, or every short prompt), alternating when both
//! wait; on a GPU a step decodes every waiting token and fills the rest with pending prompts,
//! holding the first token of requests that arrived together until their prompts are in
//! (`plan::compose`, `plan::mixed`).
//! Invariants:
//! - Batch invariance (CPU only, with patches/llama.cpp): a request's tokens do not depend on
//!   what else is running. A prompt is therefore cut into the same chunks, each decoded alone, as
//!   when it runs alone (llama.cpp picks kernels by rows per sequence: flash attention tiles
//!   from 64 rows on, and a prompt beside others is split into equal per-sequence ubatches),
//!   except short prompts, whose rows are attended row by row however they are cut; decode rows
//!   use row-invariant kernels whatever their number (src/numerics.rs).
//! - `slot.cache[i]` is the token at KV position `i` of sequence `slot.seq`, for every `i`; every
//!   KV edit (reuse, shift, clear) edits `cache` the same way.
//! - A sampled token is streamed when sampled and enters the KV on the next step; a cancelled or
//!   finished request therefore leaves `cache` == KV, ready for prefix reuse.
//! - A request whose response channel is closed is dropped at the start of the next step.
//! - At the start of a step the busy slots sit on consecutive sequence ids (`compact`), and the
//!   batch lists tokens in sequence order: llama.cpp keeps such a step in one micro-batch.
//! - An active request's sequence has a device top-k chain attached exactly when the request
//!   does not need its whole logits row (`sync_device`); idle sequences keep whatever they had,
//!   since every attach or detach costs a graph reserve.
//! - Speculative decoding (engine/draft.rs): a decoding slot may put draft tokens after its
//!   sampled token, each with a logits row. Rows are sampled in order while the sampled token
//!   equals the next draft token; the draft tokens after the first mismatch (or after the
//!   request ends) leave the KV and `cache` together, so `cache` == KV still holds. A draft of
//!   grammar-forced tokens (`forced_run`) has a row only at its end: every earlier row would
//!   sample the next forced token, so those are taken without rows.

use crate::ffi::{Batch, Context, DecodeError, Model, Row, Token};
use crate::plan::{self, Take};
use crate::sampling::{Choice, Sampler};
use runner_core::jobs::Job;
use runner_core::reply::Reply;
use runner_protocol::{CompletionChunk, CompletionRequest, DoneReason, ErrorKind, RunnerError};
use sample::sample_all;
use stats::{Phase, StepStats};
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

mod admit;
mod cancel;
mod draft;
pub use draft::Drafting;
pub mod draft_model;
mod embedding;
mod pad;
mod prewake;
mod sample;
mod setup;
mod speculative;
mod stats;
pub mod vision;

struct Active {
    /// The answer stream: budget, stop strings, logprobs, counters (runner_core::reply).
    reply: Reply,
    req: CompletionRequest,
    /// Prompt tokens not yet in the KV.
    pending: Vec<Token>,
    /// Images among `pending`, by position in the slot's sequence; an image is evaluated when
    /// the cache has reached its position.
    media: VecDeque<vision::Media>,
    /// Sampled token waiting to enter the KV.
    next: Option<Token>,
    sampler: Sampler,
    logits_at: Option<i32>,
    /// The request needs whole logits rows (no device sampling for it).
    needs_row: bool,
    /// Draft tokens put into this step after `next` (their rows in `draft_rows`).
    draft: Vec<Token>,
    draft_rows: Vec<i32>,
    /// The rest of the text the grammar forces, in the model's tokens: the next samples are
    /// restricted to these in order (engine/speculative.rs, `restrict`).
    forced: VecDeque<Token>,
    /// This step's draft is forced text evaluated without logits rows: what each of its rows
    /// would sample is known, so only the last one has a row (`speculative::take_forced`).
    forced_run: bool,
    /// Tokens the n-gram drafter may propose per step (0 = it is off for this request).
    ngram: usize,
    /// How well this request's n-gram drafts are accepted (runner-core draft::pace).
    pace: runner_core::draft::pace::Pace,
    /// This step's draft came from the n-gram drafter (its verification feeds `pace`).
    ngram_draft: bool,
}

struct Slot {
    seq: i32,
    cache: Vec<Token>,
    active: Option<Active>,
}

pub struct Engine {
    ctx: Context,
    model: Arc<Model>,
    batch: Batch,
    slots: Vec<Slot>,
    queue: VecDeque<Job>,
    n_ctx_seq: usize,
    /// Threads that sample large steps (`sample::pool`).
    pool: Option<rayon::ThreadPool>,
    /// Steps either decode or prefill (one prompt chunk, or every short prompt; `plan::compose`):
    /// CPU batch invariance.
    isolate_prompts: bool,
    /// The last step was a prefill step: with `isolate_prompts`, the next one decodes if any
    /// slot waits to.
    prefilled_last: bool,
    /// Steps in a row that held a ready slot's first token back (GPU; `plan::mixed`).
    held_steps: usize,
    /// First tokens may be held at all (the runner's `--no-first-token-hold` turns it off).
    hold: bool,
    /// K of the device top-k; None = every row comes whole to the host.
    k_dev: Option<usize>,
    stats: StepStats,
    projector: Option<Arc<crate::ffi::Projector>>,
    drafting: Drafting,
    /// The draft model (`--draft-model`), when the model has one.
    drafter: Option<draft_model::DraftModel>,
    /// Decode-step time against token count, for the n-gram draft length (runner-core draft::pace).
    cost: runner_core::draft::pace::StepCost,
    /// One-token decode steps keep their sequence set as streams end (`plan::padding`; GPU).
    pad: pad::Pad,
    /// Wakes the sampling pool before a decode step's logits land (`--prewake`; GPU default).
    prewake: prewake::Prewake,
}

impl Engine {
    pub fn new(ctx: Context, parallel: usize, n_batch: usize, isolate_prompts: bool) -> Engine {
        let n_ctx_seq = ctx.n_ctx_seq() as usize;
        let model = ctx.model().clone();
        let pool = sample::pool(ctx.n_threads());
        let k_dev = ctx.device_top_k();
        Engine {
            ctx,
            model,
            batch: Batch::new(n_batch.max(parallel)),
            slots: (0..parallel)
                .map(|i| Slot {
                    seq: i as i32,
                    cache: Vec::new(),
                    active: None,
                })
                .collect(),
            queue: VecDeque::new(),
            n_ctx_seq,
            pool,
            isolate_prompts,
            prefilled_last: false,
            held_steps: 0,
            hold: true,
            k_dev,
            stats: StepStats::new(0),
            projector: None,
            drafting: Drafting::default(),
            drafter: None,
            cost: runner_core::draft::pace::StepCost::default(),
            pad: pad::Pad::default(),
            prewake: prewake::Prewake::default(),
        }
    }

    /// Serve jobs until `Shutdown`, a closed channel, or an abort.
    pub fn run(mut self, rx: Receiver<Job>) {
        loop {
            let busy = self.slots.iter().any(|s| s.active.is_some());
            if !busy && self.queue.is_empty() {
                self.stats.idle();
                match rx.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return self.shutdown(),
                }
            }
            loop {
                match rx.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => return self.shutdown(),
                }
            }
            if self.queue.iter().any(|j| matches!(j, Job::Shutdown)) {
                return self.shutdown();
            }
            cancel::drop_closed(&mut self.slots);
            self.admit();
            if self.slots.iter().any(|s| s.active.is_some()) && !self.step() {
                return self.shutdown();
            }
        }
    }

    fn shutdown(&mut self) {
        const MSG: &str = "runner is shutting down";
        let err = || RunnerError::new(ErrorKind::Cancelled, MSG);
        for slot in &mut self.slots {
            if let Some(a) = slot.active.take() {
                a.reply.fail(ErrorKind::Cancelled, MSG);
            }
        }
        for job in self.queue.drain(..) {
            match job {
                Job::Complete(j) => drop(j.out.send(CompletionChunk::Error { error: err() })),
                Job::Embed(j) => drop(j.reply.send(Err(err()))),
                Job::Shutdown => {}
            }
        }
    }

    /// Move busy slots onto consecutive sequence ids (`plan::compaction`): the request and its
    /// token history go to the lower slot, whose sequence becomes a copy of the upper one; the
    /// upper slot keeps that same history as an idle prefix cache. Runs before `make_room` in a
    /// step, so no K-shift is pending in a copied stream.
    fn compact(&mut self) {
        let busy: Vec<bool> = self.slots.iter().map(|s| s.active.is_some()).collect();
        for (from, to) in plan::compaction(&busy) {
            let (src, dst) = (self.slots[from].seq, self.slots[to].seq);
            self.ctx.seq_cp(src, dst);
            if crate::ffi::log_debug() {
                eprintln!("runner-llamacpp: moved slot {from} to slot {to}");
            }
            let active = self.slots[from].active.take();
            let cache = self.slots[from].cache.clone();
            self.slots[to].active = active;
            self.slots[to].cache = cache;
            self.sync_device(to);
        }
    }

    /// Fill each decoding slot's draft and cut them to one length (engine/speculative.rs).
    fn propose(&mut self) {
        speculative::propose_all(
            &self.model,
            &mut self.slots,
            self.drafter.as_mut(),
            &self.drafting,
            &self.cost,
            self.n_ctx_seq,
            self.batch.capacity(),
        );
        speculative::equalize(&mut self.slots);
    }

    /// One batched decode. Returns false when the engine must stop (shutdown aborted it).
    fn step(&mut self) -> bool {
        self.stats.lap(Phase::Loop);
        self.compact();
        // A prompt that has reached an image evaluates it in a step of its own.
        if let Some(i) = self.image_due() {
            self.eval_image(i);
            self.prefilled_last = true;
            return true;
        }
        self.batch.clear();
        self.propose();
        let mut in_prefill = vec![false; self.slots.len()];
        // Tokens go in in slot (= sequence) order, which llama.cpp needs to keep a step in one
        // micro-batch.
        let state: Vec<plan::Work> = self
            .slots
            .iter()
            .map(|s| {
                let idle = plan::Work {
                    decode: 0,
                    prompt: 0,
                    ends: false,
                };
                s.active.as_ref().map_or(idle, |a| {
                    // Text up to the next image (which gets a step of its own).
                    let text = a
                        .media
                        .front()
                        .map_or(a.pending.len(), |m| m.at - s.cache.len());
                    let decode = if a.next.is_some() {
                        1 + a.draft.len()
                    } else {
                        0
                    };
                    plan::Work {
                        decode,
                        prompt: text,
                        ends: a.media.is_empty(),
                    }
                })
            })
            .collect();
        let plan::Step {
            takes,
            prefill,
            held,
        } = plan::compose(
            &state,
            self.batch.capacity(),
            self.isolate_prompts,
            self.prefilled_last,
            if self.hold {
                self.held_steps
            } else {
                plan::MAX_HOLD_STEPS
            },
        );
        self.prefilled_last = prefill;
        self.held_steps = if held { self.held_steps + 1 } else { 0 };
        let pads = self.pads(&state, &takes);
        let before: Vec<usize> = self.slots.iter().map(|s| s.cache.len()).collect();
        for (k, (slot, take)) in self.slots.iter_mut().zip(takes).enumerate() {
            let Some(a) = slot.active.as_mut() else {
                if pads.contains(&k) {
                    pad::push(&mut self.batch, slot);
                }
                continue;
            };
            a.logits_at = None;
            a.draft_rows.clear();
            match take {
                Take::Nothing => {}
                Take::Prompt(n) => {
                    for j in 0..n {
                        let last = j + 1 == a.pending.len();
                        let idx =
                            self.batch
                                .push(a.pending[j], slot.cache.len() as i32, slot.seq, last);
                        if last {
                            a.logits_at = idx;
                            speculative::restrict(&self.model, a);
                        }
                        slot.cache.push(a.pending[j]);
                    }
                    a.pending.drain(..n);
                    in_prefill[k] = true;
                }
                Take::Decode => {
                    let Some(t) = a.next else { continue };
                    if slot.cache.len() >= self.n_ctx_seq && !make_room(&mut self.ctx, slot) {
                        finish(slot, DoneReason::Length);
                        continue;
                    }
                    let a = slot.active.as_mut().expect("checked above");
                    let Some(idx) = self.batch.push(t, slot.cache.len() as i32, slot.seq, true)
                    else {
                        break;
                    };
                    a.next = None;
                    a.logits_at = Some(idx);
                    slot.cache.push(t);
                    // `propose` sized the drafts to fit the batch beside everything else.
                    let mut placed = 0;
                    for &d in &a.draft {
                        let pos = slot.cache.len() as i32;
                        let Some(idx) = self.batch.push(d, pos, slot.seq, !a.forced_run) else {
                            break;
                        };
                        if a.forced_run {
                            a.logits_at = Some(idx);
                        } else {
                            a.draft_rows.push(idx);
                        }
                        placed += 1;
                        slot.cache.push(d);
                    }
                    if a.forced_run && placed > 0 {
                        // Only the run's last row is sampled.
                        self.batch.set_logits(idx, false);
                        self.batch.set_logits(a.logits_at.unwrap_or(idx), true);
                    }
                    a.draft.truncate(placed);
                    a.reply.timings.drafted += a.draft.len() as u32;
                }
            }
        }
        if self.batch.is_empty() {
            return true;
        }
        self.stats.lap(Phase::Build);

        let started = Instant::now();
        let res = cancel::launch(&mut self.ctx, &self.batch, &self.slots, &in_prefill);
        // Grammar workers held back by `--mask-after-launch` compute while the device does.
        runner_core::grammar::gate::launched();
        self.stats.lap(Phase::Launch);
        if res.is_ok() {
            self.prewake
                .arm(self.pool.as_ref(), !in_prefill.contains(&true));
            self.ctx.synchronize();
            self.prewake.landed();
        }
        self.unpad(&pads);
        let took = started.elapsed().as_nanos() as u64;
        self.stats.lap(Phase::Wait);
        if res.is_ok() && !in_prefill.contains(&true) {
            // The KV view llama.cpp gave the step: its longest sequence (a pad row adds one).
            let kv = (self.slots.iter().enumerate())
                .filter(|(k, s)| s.active.is_some() || pads.contains(k))
                .map(|(k, s)| s.cache.len() + usize::from(pads.contains(&k)))
                .max()
                .unwrap_or(0);
            self.cost.observe_step(self.batch.len(), kv, took);
        }
        if let Err(e) = res {
            let (kind, msg) = match e {
                DecodeError::Aborted => {
                    return cancel::after_abort(
                        &mut self.ctx,
                        &mut self.slots,
                        &before,
                        &in_prefill,
                    )
                }
                DecodeError::NoKvSlot => (
                    ErrorKind::Internal,
                    "no room in the KV cache for the batch".to_string(),
                ),
                DecodeError::Failed(c) => {
                    (ErrorKind::Internal, format!("llama_decode failed ({c})"))
                }
            };
            for (k, slot) in self.slots.iter_mut().enumerate() {
                let took_part =
                    slot.active.as_ref().is_some_and(|a| a.logits_at.is_some()) || in_prefill[k];
                if took_part {
                    if let Some(a) = slot.active.take() {
                        a.reply.fail(kind, msg.clone());
                    }
                    // The KV state of this sequence is unknown now; forget it.
                    self.ctx.seq_rm(slot.seq, -1, -1);
                    slot.cache.clear();
                }
            }
            return true;
        }

        cancel::heartbeats(&self.slots, &in_prefill);
        for (k, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if in_prefill[k] {
                a.reply.timings.prompt_eval_duration_ns += took;
            } else if a.logits_at.is_some() {
                a.reply.timings.eval_duration_ns += took;
            }
        }
        // Forced runs first: their known tokens are streamed, and a request they end has no
        // row to sample.
        let mut cuts = Vec::new();
        for slot in &mut self.slots {
            if let Some(cut) = speculative::take_forced(&self.model, slot) {
                cuts.push((slot.seq, cut));
            }
        }
        let mut rows_at = Vec::with_capacity(self.slots.len());
        for slot in &mut self.slots {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if let Some(idx) = a.logits_at {
                let dev = self.ctx.device_sampling(slot.seq);
                rows_at.push((idx, dev));
                rows_at.extend(a.draft_rows.iter().map(|&i| (i, dev)));
            }
        }
        let n_rows = rows_at.len();
        let Some(rows) = self.ctx.output_rows(&rows_at) else {
            for slot in &mut self.slots {
                if slot.active.as_ref().is_some_and(|a| a.logits_at.is_some()) {
                    fail(slot, ErrorKind::Internal, "llama.cpp returned no logits");
                }
            }
            return true;
        };
        // Rows were collected in slot order: each sampling slot's first row, then its drafts'.
        let mut rows = rows.into_iter();
        let mut work: Vec<(&mut Active, Row)> = Vec::with_capacity(n_rows);
        let mut drafted: Vec<Vec<Row>> = Vec::new();
        for a in self
            .slots
            .iter_mut()
            .filter_map(|s| s.active.as_mut().filter(|a| a.logits_at.is_some()))
        {
            let Some(first) = rows.next() else { break };
            drafted.push(rows.by_ref().take(a.draft_rows.len()).collect());
            work.push((a, first));
        }
        self.stats.lap(Phase::Rows);
        let (choices, cpu) = sample_all(&mut work, self.pool.as_ref(), self.stats.on());
        self.stats.sample_cpu(cpu);
        drop(work);
        // Held-back grammar commits go to their workers now that no row is being sampled.
        for a in self.slots.iter_mut().filter_map(|s| s.active.as_mut()) {
            a.sampler.flush();
        }
        self.stats.lap(Phase::Sample);
        let sampled = self
            .slots
            .iter_mut()
            .filter(|s| s.active.as_ref().is_some_and(|a| a.logits_at.is_some()));
        for ((slot, choice), more) in sampled.zip(choices).zip(drafted) {
            if let Some(cut) = speculative::verify(&self.model, slot, choice, more) {
                cuts.push((slot.seq, cut));
            }
            // Draft rows verified after the first committed more.
            if let Some(a) = slot.active.as_mut() {
                a.sampler.flush();
            }
        }
        // The rows are gone now: the rejected draft tokens leave the KV.
        for (seq, cut) in cuts {
            self.ctx.seq_rm(seq, cut as i32, -1);
        }
        self.stats.lap(Phase::Emit);
        self.stats
            .end(self.batch.len(), n_rows, pads.len(), prefill);
        true
    }
}

/// Context shift: drop half of the tokens after `num_keep`. False when shifting is off or the
/// memory cannot shift.
fn make_room(ctx: &mut Context, slot: &mut Slot) -> bool {
    let Some(a) = slot.active.as_ref() else {
        return false;
    };
    if !a.req.shift || !ctx.can_shift() {
        return false;
    }
    let (keep, discard) = plan::shift(slot.cache.len(), a.req.num_keep);
    let (k, d) = (keep as i32, discard as i32);
    if !ctx.seq_rm(slot.seq, k, k + d) {
        return false;
    }
    ctx.seq_add(slot.seq, k + d, -1, -d);
    slot.cache.drain(keep..keep + discard);
    true
}

/// Stream the sampled token; it enters the KV on the next step unless it ended the request.
fn on_token(model: &Model, slot: &mut Slot, choice: Choice) {
    let Some(a) = slot.active.as_mut() else {
        return;
    };
    let t = choice.token;
    // The forced text goes on only while its tokens are the ones chosen.
    if a.forced.front() == Some(&t) {
        a.forced.pop_front();
    } else {
        a.forced.clear();
    }
    match a.reply.token(model, model.is_eog(t), &choice) {
        Some(reason) => finish(slot, reason),
        None => a.next = Some(t),
    }
}

/// End the slot's request: release held text (unless a stop string ended it) and send Done.
fn finish(slot: &mut Slot, reason: DoneReason) {
    if let Some(a) = slot.active.take() {
        a.reply.finish(reason);
    }
}

fn fail(slot: &mut Slot, kind: ErrorKind, msg: &str) {
    if let Some(a) = slot.active.take() {
        a.reply.fail(kind, msg);
    }
}
