//! Drafting for speculative decoding: which tokens a slot proposes after its sampled token, and
//! how a verified step is accounted for. Pure policy; the engine (engine.rs, `step`) puts the
//! draft into the batch beside its sampled token and verifies it (`verify` in engine.rs).
//!
//! Drafters, in the order a slot asks them:
//! - grammar fast-forward: the tokens the request's grammar forces next (llguidance's
//!   `compute_ff_tokens`); always on, since a forced token is what sampling picks anyway;
//! - the n-gram (prompt lookup) drafter: the continuation of the most recent earlier occurrence
//!   of the longest suffix of the slot's tokens (`--draft-ngram K`); model-free. Of its up to K
//!   tokens, runner-core's draft::pace keeps as many as pay at the measured step cost.
//!
//! Verification keeps the target's distribution whatever the drafter: each row is sampled with
//! the request's own sampler exactly as a one-token step would be, and the draft is accepted
//! while the sampled token equals the drafted one (for a deterministic drafter that is the
//! standard acceptance rule). So greedy output is the same bytes with drafting on or off, and a
//! seeded request draws the same tokens.

pub use runner_core::draft::{budget, ngram_paced};

/// How slots draft (engine/draft.rs): the runner's `--draft-*` flags.
#[derive(Debug, Clone, Copy)]
pub struct Drafting {
    /// Tokens the n-gram drafter proposes per step; 0 = off.
    pub ngram: usize,
    /// Constrained requests use the n-gram drafter too (`HERD_DRAFT_UNDER_GRAMMAR`).
    pub under_grammar: bool,
    /// Grammar fast-forward: the tokens a grammar forces are drafted.
    pub grammar_ff: bool,
    /// A draft token's cost relative to a step, given instead of measured (`--draft-cost`).
    pub cost: Option<f64>,
    /// n-gram drafts of `2^j - 1` tokens only (runner-core draft::pace): on a GPU, where each
    /// step token count keeps its own CUDA graph.
    pub shaped: bool,
}

impl Default for Drafting {
    fn default() -> Self {
        Drafting {
            ngram: 0,
            under_grammar: false,
            grammar_ff: true,
            cost: None,
            shaped: false,
        }
    }
}

/// The draft length every decoding slot of a step keeps, given what each drafted (`lens`, one
/// per decoding slot): the shortest, so every sequence brings the same token count and the step
/// stays one llama.cpp pass (engine/speculative.rs, `propose_all`). One slot keeps its own.
pub fn common_len(lens: &[usize]) -> usize {
    lens.iter().copied().min().unwrap_or(0)
}

/// Drafting steps in a row that keep nothing before the draft model pauses ([`pause_after`]):
/// natural text has runs of positions the draft model is unsure of, rarely this long.
pub const PAUSE_FROM: u32 = 8;
/// Longest pause of the draft model: 2^5 - 1 steps.
pub const PAUSE_MAX_LOG2: u32 = 5;

/// Steps the draft model sits out after `misses` drafting steps in a row that kept no draft
/// token (the draft model unsure of its first token for some slot, so the step's common draft
/// length was 0): none below [`PAUSE_FROM`], then 1, 3, 7, 15, and 31 from then on. A draft
/// decode of a draft model as large as the target costs a whole step, so a drafter that never
/// proposes (run on the H200: self-draft on random weights, 0.47x of no draft at 1 stream,
/// 0.24x at 16) must stop costing that; one kept draft ends the run of misses (the history is
/// caught up in one batched decode when it drafts again).
pub fn pause_after(misses: u32) -> u32 {
    match misses.checked_sub(PAUSE_FROM - 1) {
        None | Some(0) => 0,
        Some(m) => (1u32 << m.min(PAUSE_MAX_LOG2)) - 1,
    }
}

/// The draft model's pause state across steps ([`pause_after`]).
#[derive(Debug, Default)]
pub struct Pause {
    /// Drafting steps in a row that kept no draft.
    misses: u32,
    /// Steps left to sit out.
    left: u32,
}

impl Pause {
    /// Whether this step is sat out; counts it down.
    pub fn sit_out(&mut self) -> bool {
        let p = self.left > 0;
        self.left = self.left.saturating_sub(1);
        p
    }

    /// A drafting step's outcome: the common draft length its decoding slots kept.
    pub fn kept(&mut self, common: usize) {
        if common == 0 {
            self.misses = self.misses.saturating_add(1);
            self.left = pause_after(self.misses);
        } else {
            self.misses = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drafter_that_keeps_nothing_drafts_ever_more_rarely_until_one_draft_is_kept() {
        // A drafter that keeps nothing: every step for 8 steps, then pauses of 1, 3, 7, 15,
        // then 31 steps.
        let mut p = Pause::default();
        let mut drafted_at = Vec::new();
        for step in 0..200 {
            if !p.sit_out() {
                drafted_at.push(step);
                p.kept(0);
            }
        }
        assert_eq!(
            drafted_at,
            [0, 1, 2, 3, 4, 5, 6, 7, 9, 13, 21, 37, 69, 101, 133, 165, 197]
        );
        // A kept draft starts the count again: 7 misses after it do not pause.
        let mut p = Pause::default();
        for _ in 0..10 {
            p.kept(0);
        }
        while p.sit_out() {}
        p.kept(2);
        for _ in 0..7 {
            p.kept(0);
            assert!(!p.sit_out());
        }
        p.kept(0);
        assert!(p.sit_out(), "the 8th miss in a row pauses");
        assert!(!p.sit_out());
    }

    #[test]
    fn the_draft_model_pauses_from_the_8th_miss_in_a_row_up_to_31_steps() {
        let cases = [
            (0, 0),
            (1, 0),
            (7, 0),
            (8, 1),
            (9, 3),
            (10, 7),
            (11, 15),
            (12, 31),
            (13, 31),
            (40, 31),
        ];
        for (misses, want) in cases {
            assert_eq!(pause_after(misses), want, "{misses}");
        }
    }

    #[test]
    fn a_step_keeps_the_shortest_draft() {
        let cases: &[(&[usize], usize)] = &[
            (&[], 0),
            (&[5], 5),
            (&[5, 3, 7], 3),
            // A slot without a draft keeps every other to none.
            (&[4, 0, 4], 0),
            (&[2, 2], 2),
        ];
        for &(lens, want) in cases {
            assert_eq!(common_len(lens), want, "{lens:?}");
        }
    }
}
