//! One constrained request's grammar matcher on its own thread, so the mask for the next token is
//! computed while the engine decodes the current one (the decode of a step takes milliseconds;
//! llguidance needs tens to hundreds of µs on a 262k vocabulary). The engine thread then only
//! waits for a mask that is usually ready and writes it into the logits.
//!
//! Protocol: the worker computes a mask at start, then after each batch of commands: `Some(token)`
//! consumes a token, `None` asks for the current state again. Commands already queued when the
//! worker wakes are applied together and answered by one result that says how many it covers
//! (commits without an `apply` between them cost one mask, not one each); a consume error is that
//! result's error.
//!
//! With the gate on (`super::gate`) a commit's mask waits for the engine's next launch after it,
//! unless the engine asks for it first (its hurry mark reaches the commit); its forced bytes
//! never wait.
//!
//! Before each mask the worker also sends the bytes the grammar forces from the new state
//! (llguidance's `compute_ff_bytes`, cheap next to a mask) on a channel of their own, so the
//! engine can draft them (grammar fast-forward) without waiting for the mask, which keeps
//! overlapping the decode. Bytes, not `compute_ff_tokens`: llguidance forces tokens only with a
//! canonical tokenizer, and ours is the trie's approximation; the engine tokenizes the bytes
//! with the model's own tokenizer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use llguidance::Matcher;
use toktrie::SimpleVob;

/// A mask for the matcher's current state, or why there is none; `engine_ns` is llguidance's
/// own time for it (consume + compute), measured on the worker.
pub(super) struct Computed {
    pub mask: Result<SimpleVob, String>,
    /// The allowed ids (ascending) when they are few enough for the sampler to read them as a
    /// list (`super::SPARSE_MAX`): worked out here, off the decode thread, which then need not
    /// read the vocabulary-sized mask at all (H100, 16 constrained streams: the decode thread
    /// spent 49–67 µs p50 on each mask it was handed ready, run Q).
    pub ids: Option<Vec<u32>>,
    pub engine_ns: u64,
    /// How many commands (or the start, counted as one) this result answers.
    pub covers: usize,
}

/// The forced bytes of the state after a batch of commands (empty after a consume error),
/// sent before that state's [`Computed`]; `covers` as there.
pub(super) struct Forced {
    pub bytes: Vec<u8>,
    pub covers: usize,
}

/// A command: the token to consume (None = the same state again), the launch count when it was
/// sent (`super::gate`), and its number (the first command is 1).
type Cmd = (Option<u32>, u64, u64);

pub(super) struct MaskWorker {
    tx: Option<Sender<Cmd>>,
    /// Commands sent so far.
    sent: u64,
    /// The last command whose mask the engine wants now: the worker does not hold it back.
    hurry: Arc<AtomicU64>,
    rx: Receiver<Computed>,
    ff_rx: Receiver<Forced>,
    handle: Option<JoinHandle<()>>,
}

impl MaskWorker {
    /// Starts the thread, which begins computing the first mask at once (overlapping prefill).
    pub fn start(mut matcher: Matcher) -> MaskWorker {
        let (tx, cmds) = channel::<Cmd>();
        let hurry = Arc::new(AtomicU64::new(0));
        let hurried = hurry.clone();
        let (results, rx) = channel::<Computed>();
        let (ff_tx, ff_rx) = channel::<Forced>();
        let handle = std::thread::Builder::new()
            .name("grammar-mask".into())
            .spawn(move || {
                // The first mask overlaps the prompt's evaluation: no gate for it.
                let mut batch = vec![(None, u64::MAX, 0)];
                loop {
                    let started = Instant::now();
                    let mut consumed = Ok(());
                    for t in batch.iter().filter_map(|(t, _, _)| t.as_ref()) {
                        if consumed.is_ok() {
                            consumed = matcher.consume_token(*t).map_err(|e| e.to_string());
                        }
                    }
                    let bytes = if consumed.is_ok() {
                        matcher.compute_ff_bytes()
                    } else {
                        Vec::new()
                    };
                    // Nobody may be listening for forced tokens; the mask channel decides
                    // when the worker ends.
                    let _ = ff_tx.send(Forced {
                        bytes,
                        covers: batch.len(),
                    });
                    let consume_ns = started.elapsed().as_nanos() as u64;
                    // The latest commit of the batch decides; a batch with a `None` (u64::MAX)
                    // is not held.
                    let seen = batch.iter().map(|&(_, at, _)| at).max().unwrap_or(u64::MAX);
                    let last = batch.iter().map(|&(_, _, n)| n).max().unwrap_or(0);
                    if seen != u64::MAX {
                        super::gate::wait_past(seen, || hurried.load(Ordering::Acquire) >= last);
                    }
                    let started = Instant::now();
                    let mask = consumed
                        .and_then(|()| matcher.compute_mask_or_eos().map_err(|e| e.to_string()));
                    let engine_ns = consume_ns + started.elapsed().as_nanos() as u64;
                    let covers = batch.len();
                    let ids = match &mask {
                        Ok(m) => super::sparse_of(m.as_slice()),
                        Err(_) => None,
                    };
                    if results
                        .send(Computed {
                            mask,
                            ids,
                            engine_ns,
                            covers,
                        })
                        .is_err()
                    {
                        return;
                    }
                    let Ok(first) = cmds.recv() else { return };
                    batch = std::iter::once(first).chain(cmds.try_iter()).collect();
                }
            })
            .ok();
        MaskWorker {
            tx: Some(tx),
            sent: 0,
            hurry,
            rx,
            ff_rx,
            handle,
        }
    }

    /// Asks for the next mask: after consuming `token`, or in the same state when `None`.
    pub fn request(&mut self, token: Option<u32>) {
        self.sent += 1;
        if let Some(tx) = &self.tx {
            // A send error means the worker has gone; `take` reports it.
            // Only a commit waits for the next launch: asking for the same state again
            // (`None`) comes from an engine that wants the mask now.
            let at = if token.is_some() {
                super::gate::now()
            } else {
                u64::MAX
            };
            let _ = tx.send((token, at, self.sent));
        }
    }

    /// Waits for the oldest outstanding forced-bytes result.
    pub fn take_forced(&self) -> Forced {
        self.ff_rx.recv().unwrap_or(Forced {
            bytes: Vec::new(),
            covers: usize::MAX,
        })
    }

    /// Waits for the oldest outstanding result; one that is not ready yet is wanted now, so the
    /// worker stops holding it back for the gate.
    pub fn take(&self) -> Computed {
        let got = match self.rx.try_recv() {
            Ok(c) => Ok(c),
            Err(TryRecvError::Disconnected) => Err(()),
            Err(TryRecvError::Empty) => {
                self.hurry.store(self.sent, Ordering::Release);
                super::gate::wake();
                self.rx.recv().map_err(|_| ())
            }
        };
        got.unwrap_or_else(|()| Computed {
            mask: Err("the grammar worker stopped".into()),
            ids: None,
            engine_ns: 0,
            covers: usize::MAX,
        })
    }
}

impl Drop for MaskWorker {
    fn drop(&mut self) {
        // Closing the command channel ends the worker after its current computation.
        self.tx.take();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
