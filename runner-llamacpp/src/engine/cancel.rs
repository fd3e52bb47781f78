//! A long prefill as its client sees it (issue 22 items 1 and 3): heartbeats while it runs, and
//! aborting a decode when a request in it is cancelled.
//!
//! Heartbeats: after each prefill chunk of a prompt that is not done yet, its stream gets a
//! `progress` chunk, so the server's progress deadline measures one chunk, not the whole
//! prompt, and never mistakes a long prefill for a stuck runner.
//!
//! A client that disconnects during a long prefill must free its slot within ~100 ms, not when
//! the current 512-token chunk ends. So while a step that carries prompt tokens computes, the
//! abort callback (ffi) also checks whether any of those requests' streams has closed, and a
//! hit aborts the decode inside the ubatch. Aborting stops the whole batch, so every other
//! sequence in it is rolled back to where it stood before the step: its KV positions from this
//! step are removed, its prompt tokens go back to `pending` and its sampled token back to
//! `next`. The next step then computes exactly what this one would have (minus the cancelled
//! request), so the other sequences' output is unaffected.
//!
//! Only prefilling requests are watched: a step without prompt tokens is one token per
//! sequence and ends soon anyway, and aborting a prefill because a decoding neighbour left
//! would throw away the prefill's work.

use super::Slot;
use crate::ffi::{AbortWatch, Batch, Context, DecodeError};

/// Sends a `progress` heartbeat to each request that prefilled in this step and still has
/// prompt tokens to go (one that finished its prompt gets its first token instead).
pub(super) fn heartbeats(slots: &[Slot], in_prefill: &[bool]) {
    for (slot, _) in slots.iter().zip(in_prefill).filter(|(_, &p)| p) {
        if let Some(a) = slot.active.as_ref().filter(|a| !a.pending.is_empty()) {
            let processed = slot.cache.len() as u32;
            a.reply.progress(processed);
        }
    }
}

/// Frees the slots of requests whose client has gone (their stream receiver dropped).
pub(super) fn drop_closed(slots: &mut [Slot]) {
    for slot in slots {
        if slot.active.as_ref().is_some_and(|a| a.reply.is_closed()) {
            slot.active = None;
        }
    }
}

/// `ctx.launch(batch)`, abortable by the cancellation of any request prefilling in it.
pub(super) fn launch(
    ctx: &mut Context,
    batch: &Batch,
    slots: &[Slot],
    in_prefill: &[bool],
) -> Result<(), DecodeError> {
    let watch: Vec<AbortWatch> = slots
        .iter()
        .zip(in_prefill)
        .filter(|(_, &p)| p)
        .filter_map(|(s, _)| s.active.as_ref())
        .map(|a| Box::new(a.reply.closed_probe()) as AbortWatch)
        .collect();
    let watching = !watch.is_empty();
    if watching {
        ctx.set_abort_watch(watch);
    }
    let res = ctx.launch(batch);
    if watching {
        ctx.set_abort_watch(Vec::new());
    }
    res
}

/// After an aborted decode: false when the runner is shutting down (the engine stops);
/// otherwise a request was cancelled, and every slot is put back as it was before the step
/// (`before`: each slot's cache length then) so the next step redoes the others' work.
pub(super) fn after_abort(
    ctx: &mut Context,
    slots: &mut [Slot],
    before: &[usize],
    in_prefill: &[bool],
) -> bool {
    if ctx.stopping() {
        return false;
    }
    let mut redo = 0;
    for (k, slot) in slots.iter_mut().enumerate() {
        // The cancelled request is rolled back too: its slot keeps the history as a prefix
        // cache, which must match the KV exactly.
        let Some(a) = slot.active.as_mut() else {
            continue;
        };
        redo += usize::from((in_prefill[k] || a.logits_at.is_some()) && !a.reply.is_closed());
        if in_prefill[k] {
            let mut taken = slot.cache.split_off(before[k].min(slot.cache.len()));
            taken.append(&mut a.pending);
            a.pending = taken;
        } else if a.logits_at.is_some() {
            // A decoding slot pushed exactly its sampled token (after any context shift) and
            // its draft tokens; the next step drafts again.
            let drafted = a.draft.len();
            slot.cache.truncate(slot.cache.len() - drafted);
            a.reply.timings.drafted -= drafted as u32;
            a.draft.clear();
            a.draft_rows.clear();
            a.next = slot.cache.pop();
        }
        a.logits_at = None;
        ctx.seq_rm(slot.seq, slot.cache.len() as i32, -1);
    }
    eprintln!("runner-llamacpp: decode aborted for a cancelled request; {redo} other sequence(s) redo the step");
    true
}
