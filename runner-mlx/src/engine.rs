//! The engine thread: owns the MLX model and `--parallel` slots (one KV cache each) and runs
//! continuous batching: every step is one `Model::forward` over all busy slots — a chunk of at
//! most `--batch` tokens of each pending prompt, the sampled token of each generating slot —
//! followed by sampling (runner-core's [`Sampler`] over the shim's logits rows) and streaming
//! ([`Reply`]).
//!
//! Invariants:
//! - `slot.tokens[i]` is the token at position `i` of `slot.cache`, for every `i`: tokens are
//!   pushed only after a forward step succeeded (a failed step changes no cache, or empties
//!   it: then the tokens are cut to match), and every cut
//!   (prefix reuse, context shift) cuts both the same way.
//! - A sampled token is streamed when sampled and enters the cache on the next step, so a
//!   finished or cancelled request leaves `tokens` == cache, ready for prefix reuse.
//! - A prompt is cut into the same chunks whatever else runs (each slot's chunk depends only on
//!   its own pending tokens), and every row of a step is computed independently of the others
//!   (per-sequence attention; row-wise matmuls and norms), so a request's tokens do not depend
//!   on its neighbours.
//! - A request whose client has gone is dropped at the start of the next step.
//!
//! Drafting (`--draft-ngram K`, runner-core's [`draft`]): a generating slot may bring up to K
//! tokens the n-gram drafter proposes after its sampled token, as many as pay at the measured
//! step cost ([`draft::pace`]); the step returns a row for each, and the rows are sampled in
//! order while the sampled token equals the drafted one. The cache and `tokens` are cut back to
//! what was accepted. A row is computed the same in a drafted step as in a one-token step
//! (runner-mlx/tests/golden.rs checks it bit for bit on CPU), so greedy output and seeded draws
//! are the same with drafting on or off.

use crate::ffi::{Cache, Model};
use crate::sampling::Sampler;
use runner_core::draft::{self, pace};
use runner_core::jobs::{CompleteJob, Job};
use runner_core::reply::Reply;
use runner_core::{slots, Token, Vocabulary};
use runner_protocol::{DoneReason, ErrorKind, RunnerError};
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

struct Active {
    reply: Reply,
    sampler: Sampler,
    /// Prompt tokens not yet in the cache.
    pending: Vec<Token>,
    /// Sampled token waiting to enter the cache.
    next: Option<Token>,
    logprobs: bool,
    top_logprobs: usize,
    shift: bool,
    num_keep: i32,
    /// Tokens the n-gram drafter may propose per step (0 = off for this request).
    ngram: usize,
    pace: pace::Pace,
}

/// How slots draft: the runner's `--draft-ngram` and `--draft-under-grammar`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Drafting {
    /// Tokens the n-gram drafter proposes per step at most; 0 = off.
    pub ngram: usize,
    /// Constrained requests draft too (`OLLAMA_MLX_DRAFT_UNDER_GRAMMAR`).
    pub under_grammar: bool,
    /// A draft token's cost relative to a step, given instead of measured (`--draft-cost`).
    pub cost: Option<f64>,
}

struct Slot {
    cache: Cache,
    tokens: Vec<Token>,
    active: Option<Active>,
}

/// What one slot feeds into a step: a prompt chunk, or its sampled token and then its draft.
struct Feed {
    slot: usize,
    tokens: Vec<Token>,
    prefill: bool,
}

impl Feed {
    /// The draft tokens after the sampled one (none in a prompt chunk).
    fn draft(&self) -> &[Token] {
        if self.prefill {
            &[]
        } else {
            &self.tokens[1..]
        }
    }

    /// Logits rows wanted: the last token's, and one per draft token.
    fn rows(&self) -> usize {
        1 + self.draft().len()
    }
}

pub struct Engine {
    model: Model,
    vocab: Arc<dyn Vocabulary>,
    eog: HashSet<Token>,
    slots: Vec<Slot>,
    queue: VecDeque<Job>,
    n_ctx_seq: usize,
    n_batch: usize,
    n_vocab: usize,
    abort: Arc<AtomicBool>,
    drafting: Drafting,
    /// Decode-step time against token count, for the draft length.
    cost: pace::StepCost,
}

impl Engine {
    pub fn new(
        model: Model,
        vocab: Arc<dyn Vocabulary>,
        parallel: usize,
        n_ctx_seq: usize,
        n_batch: usize,
        abort: Arc<AtomicBool>,
    ) -> Engine {
        let slots = (0..parallel)
            .map(|_| Slot {
                cache: model.new_cache(),
                tokens: Vec::new(),
                active: None,
            })
            .collect();
        Engine {
            eog: vocab.eog_tokens().into_iter().collect(),
            n_vocab: vocab.n_vocab() as usize,
            model,
            vocab,
            slots,
            queue: VecDeque::new(),
            n_ctx_seq,
            n_batch: n_batch.max(1),
            abort,
            drafting: Drafting::default(),
            cost: pace::StepCost::default(),
        }
    }

    pub fn with_drafting(mut self, d: Drafting) -> Engine {
        if let Some(rho) = d.cost {
            self.cost = pace::StepCost::fixed(rho);
        }
        self.drafting = d;
        self
    }

    fn busy(&self) -> bool {
        self.slots.iter().any(|s| s.active.is_some())
    }

    /// Serve jobs until `Shutdown`, a closed channel, or the abort flag.
    pub fn run(mut self, rx: Receiver<Job>) {
        loop {
            // Block only when there is nothing to compute.
            if !self.busy() && self.queue.is_empty() {
                let Ok(job) = rx.recv() else { break };
                self.queue.push_back(job);
            }
            let gone = loop {
                match rx.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(TryRecvError::Empty) => break false,
                    Err(TryRecvError::Disconnected) => break true,
                }
            };
            let stop = self.queue.iter().any(|j| matches!(j, Job::Shutdown));
            if gone || stop || self.abort.load(Ordering::SeqCst) {
                break;
            }
            for slot in &mut self.slots {
                if slot.active.as_ref().is_some_and(|a| a.reply.is_closed()) {
                    slot.active = None;
                }
            }
            self.admit();
            if self.busy() {
                self.step();
            }
        }
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let err = RunnerError::new(ErrorKind::Cancelled, "runner is shutting down");
        for a in self.slots.iter_mut().filter_map(|s| s.active.take()) {
            a.reply.fail(err.kind, err.message.clone());
        }
        for job in self.queue.drain(..) {
            job.fail(&err);
        }
    }

    /// Move queued jobs onto free slots in arrival order; embeddings are refused at once.
    fn admit(&mut self) {
        while let Some(job) = self.queue.front() {
            if let Job::Complete(j) = job {
                let free = self
                    .slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.active.is_none())
                    .map(|(i, s)| (i, s.tokens.as_slice()));
                let Some(i) = slots::pick_slot(free, &j.tokens) else {
                    return;
                };
                if let Some(Job::Complete(j)) = self.queue.pop_front() {
                    self.start(i, *j);
                }
                continue;
            }
            match self.queue.pop_front() {
                Some(Job::Embed(j)) => {
                    let _ = j.reply.send(Err(RunnerError::new(
                        ErrorKind::BadRequest,
                        "this model does not support embeddings (runner-mlx serves \
                         generative models only)",
                    )));
                }
                Some(other) => {
                    self.queue.push_front(other);
                    return;
                }
                None => return,
            }
        }
    }

    fn start(&mut self, i: usize, job: CompleteJob) {
        let n_ctx = self.n_ctx_seq;
        let slot = &mut self.slots[i];
        let reuse = slots::reuse_len(&slot.tokens, &job.tokens, job.req.cache_prompt);
        slot.tokens.truncate(reuse);
        slot.cache.truncate(reuse);
        if debug() {
            eprintln!(
                "runner-mlx: slot {i}: {} prompt tokens, {reuse} from the cache",
                job.tokens.len()
            );
        }
        let Some(reply) = Reply::new(job.out, &job.req, job.tokens.len(), reuse, n_ctx) else {
            return;
        };
        let constrained = job.req.constraint.is_some();
        let ngram = if constrained && !self.drafting.under_grammar {
            0
        } else {
            self.drafting.ngram
        };
        slot.active = Some(Active {
            reply,
            sampler: Sampler::new(&job.req.sampling, &job.tokens, n_ctx, job.mask),
            pending: job.tokens[reuse..].to_vec(),
            next: None,
            logprobs: job.req.logprobs || job.req.top_logprobs > 0,
            top_logprobs: job.req.top_logprobs.min(20) as usize,
            shift: job.req.shift,
            num_keep: job.req.num_keep,
            ngram,
            pace: pace::Pace::default(),
        });
    }

    /// What each busy slot feeds into this step. A generating slot whose context is full shifts
    /// (its kept tail is evaluated again as a prompt) or ends with `length`.
    fn feeds(&mut self) -> Vec<Feed> {
        let mut feeds = Vec::new();
        let decoders = self
            .slots
            .iter()
            .filter_map(|s| s.active.as_ref())
            .filter(|a| a.pending.is_empty() && a.next.is_some())
            .count();

        for (i, slot) in self.slots.iter_mut().enumerate() {
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if a.pending.is_empty() && slot.tokens.len() >= self.n_ctx_seq {
                if !a.shift {
                    if let Some(a) = slot.active.take() {
                        a.reply.finish(DoneReason::Length);
                    }
                    continue;
                }
                shift(slot);
            }
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if !a.pending.is_empty() {
                let n = a.pending.len().min(self.n_batch);
                feeds.push(Feed {
                    slot: i,
                    tokens: a.pending[..n].to_vec(),
                    prefill: true,
                });
            } else if let Some(t) = a.next {
                let draft = propose(
                    slot,
                    t,
                    self.n_ctx_seq,
                    self.n_batch,
                    (&self.cost, decoders),
                );
                let mut tokens = vec![t];
                tokens.extend(draft);
                feeds.push(Feed {
                    slot: i,
                    tokens,
                    prefill: false,
                });
            }
        }
        feeds
    }

    /// One batched forward step and the sampling after it.
    fn step(&mut self) {
        let feeds = self.feeds();
        if feeds.is_empty() {
            return;
        }
        let started = Instant::now();
        let rows: Vec<usize> = feeds.iter().map(Feed::rows).collect();
        let res = {
            let mut wanted = feeds.iter().map(|f| f.slot).peekable();
            let mut segs: Vec<(&mut Cache, &[i32])> = Vec::with_capacity(feeds.len());
            let mut f = feeds.iter();
            for (i, slot) in self.slots.iter_mut().enumerate() {
                if wanted.peek() == Some(&i) {
                    wanted.next();
                    let feed = f.next().expect("one feed per wanted slot");
                    segs.push((&mut slot.cache, &feed.tokens));
                }
            }
            self.model.forward_rows(&mut segs, &rows)
        };
        let took = started.elapsed().as_nanos() as u64;
        if res.is_ok() && feeds.iter().all(|f| !f.prefill) {
            self.cost
                .observe(feeds.iter().map(|f| f.tokens.len()).sum(), took);
        }
        let mut logits = match res {
            Ok(l) => l,
            Err(e) => {
                for f in &feeds {
                    // A failed evaluation empties the step's caches (ffi::Model::forward).
                    let slot = &mut self.slots[f.slot];
                    slot.tokens.truncate(slot.cache.len());
                    if let Some(a) = slot.active.take() {
                        a.reply
                            .fail(ErrorKind::Internal, format!("MLX step failed: {e}"));
                    }
                }
                return;
            }
        };
        let mut at = 0;
        for f in feeds {
            let first = at;
            at += f.rows();
            let slot = &mut self.slots[f.slot];
            let before = slot.tokens.len();
            slot.tokens.extend_from_slice(&f.tokens);
            let Some(a) = slot.active.as_mut() else {
                continue;
            };
            if f.prefill {
                a.pending.drain(..f.tokens.len());
                a.reply.timings.prompt_eval_duration_ns += took;
                if !a.pending.is_empty() {
                    a.reply.progress(slot.tokens.len() as u32);
                    continue;
                }
            } else {
                a.next = None;
                a.reply.timings.eval_duration_ns += took;
            }
            let rows = &mut logits[first * self.n_vocab..at * self.n_vocab];
            let kept = verify(slot, rows, f.draft(), self.n_vocab, &*self.vocab, &self.eog);
            if !f.prefill {
                // The sampled token and the accepted draft tokens stay; rejected ones go.
                let cut = before + 1 + kept;
                if cut < slot.tokens.len() {
                    slot.tokens.truncate(cut);
                    slot.cache.truncate(cut);
                }
            }
        }
    }
}

/// A generating slot's draft after its sampled token `t` (empty when the n-gram drafter is off
/// for it, finds nothing, or a draft does not pay at the step's cost with `decoders` decoding
/// slots): at most what the request may still generate, what its context holds, and the
/// step's batch.
fn propose(
    slot: &mut Slot,
    t: Token,
    n_ctx: usize,
    n_batch: usize,
    (cost, decoders): (&pace::StepCost, usize),
) -> Vec<Token> {
    let Some(a) = slot.active.as_mut() else {
        return Vec::new();
    };
    let room = n_ctx.saturating_sub(slot.tokens.len() + 1);
    let n = draft::budget(a.ngram, a.reply.left(), room, n_batch.saturating_sub(1));
    if n == 0 {
        return Vec::new();
    }
    draft::ngram_paced(&mut slot.tokens, t, n, &mut a.pace, cost, decoders)
}

/// Sample a slot's rows in order (its last token's, then each token's of `draft` while the
/// token sampled before it equals that draft token), streaming each choice. Returns how many
/// draft tokens were accepted.
fn verify(
    slot: &mut Slot,
    rows: &mut [f32],
    draft: &[Token],
    n_vocab: usize,
    vocab: &dyn Vocabulary,
    eog: &HashSet<Token>,
) -> usize {
    let Some(a) = slot.active.as_mut() else {
        return 0;
    };
    a.reply.timings.drafted += draft.len() as u32;
    let mut used = 0;
    while let Some(a) = slot.active.as_mut() {
        let row = &mut rows[used * n_vocab..(used + 1) * n_vocab];
        let Some(c) = a.sampler.sample(row, a.logprobs, a.top_logprobs) else {
            if let Some(a) = slot.active.take() {
                a.reply.fail(
                    ErrorKind::Internal,
                    "no token could be sampled (all masked)",
                );
            }
            break;
        };
        match a.reply.token(vocab, eog.contains(&c.token), &c) {
            None => a.next = Some(c.token),
            Some(reason) => {
                if let Some(a) = slot.active.take() {
                    a.reply.finish(reason);
                }
                break;
            }
        }
        if used == draft.len() || c.token != draft[used] {
            break;
        }
        // The sampled token is the next draft token, already in the cache: its row is next.
        a.next = None;
        a.reply.timings.accepted += 1;
        used += 1;
    }
    if let Some(a) = slot.active.as_mut() {
        a.pace.observe(draft.len(), used);
    }
    used
}

/// Context shift for a full slot: keep `num_keep`, drop half of the rest. The cache keeps the
/// unchanged prefix; the tail after the dropped part (and the sampled token) is evaluated again
/// at its new positions, since its keys were rotated for the old ones.
fn shift(slot: &mut Slot) {
    let Some(a) = slot.active.as_mut() else {
        return;
    };
    let (keep, discard) = slots::shift(slot.tokens.len(), a.num_keep);
    let mut again = slot.tokens.split_off(keep);
    again.drain(..discard.min(again.len()));
    again.extend(a.next.take());
    slot.cache.truncate(keep);
    a.pending = again;
}

/// OLLAMA_DEBUG is set: report per-request decisions on stderr.
fn debug() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("OLLAMA_DEBUG").is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
    })
}
