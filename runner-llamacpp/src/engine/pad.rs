//! Step padding on the engine's side (`plan::padding` decides): the idle sequences a one-token
//! decode step pads get one throwaway row each, at the position after their cached tokens and
//! in sequence order with the real rows, and lose it right after the decode, so `cache` == KV
//! holds again before anything reads either. Their rows' logits are requested (as every decode
//! row's are, so the step's output count matches the steps it imitates) and never read.

use super::{Engine, Slot};
use crate::ffi::Batch;
use crate::plan::{self, Padding, Seat, Take, Work};

/// Padding state: on or off, and what the last one-token decode steps covered.
#[derive(Debug, Default)]
pub(super) struct Pad {
    pub on: bool,
    covered: Padding,
}

impl Engine {
    /// The idle slots this step pads, given each slot's work and take.
    pub(super) fn pads(&mut self, state: &[Work], takes: &[Take]) -> Vec<usize> {
        if !self.pad.on {
            return Vec::new();
        }
        let seats: Vec<Seat> = self
            .slots
            .iter()
            .zip(state.iter().zip(takes))
            .map(|(s, (w, t))| match (&s.active, t) {
                (Some(_), Take::Decode) if w.decode == 1 => Seat::Decodes,
                (Some(_), _) => Seat::Busy,
                (None, _) if s.cache.len() < self.n_ctx_seq => Seat::Free,
                (None, _) => Seat::Full,
            })
            .collect();
        let p = plan::padding(&seats, &self.pad.covered);
        // The debug log reports changes only: `covered.pads` are the last step's pads.
        if crate::ffi::log_debug() && !p.pads.is_empty() && p.pads != self.pad.covered.pads {
            let n = p.covers.len() - p.pads.len();
            eprintln!(
                "runner-llamacpp: padded a decode step of {n} sequences with idle {:?}",
                p.pads
            );
        }
        let pads = p.pads.clone();
        self.pad.covered = p;
        pads
    }

    /// Take the pad rows out of the KV again.
    pub(super) fn unpad(&mut self, pads: &[usize]) {
        for &k in pads {
            let Slot { seq, cache, .. } = &self.slots[k];
            // Removing a sequence's tail cannot fail (llama.cpp refuses only partial removals
            // inside recurrent state, and padded models decode one token per step anyway).
            let removed = self.ctx.seq_rm(*seq, cache.len() as i32, -1);
            debug_assert!(removed, "pad row of sequence {seq} stayed in the KV");
        }
    }
}

/// Put an idle slot's pad row into the batch.
pub(super) fn push(batch: &mut Batch, slot: &Slot) {
    let token = slot.cache.last().copied().unwrap_or(0);
    batch.push(token, slot.cache.len() as i32, slot.seq, true);
}
