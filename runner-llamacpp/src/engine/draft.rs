//! Drafting for speculative decoding: which tokens a slot proposes after its sampled token, and
//! how a verified step is accounted for. Pure policy; the engine (engine.rs, `step`) puts the
//! draft into the batch beside its sampled token and verifies it (`verify` in engine.rs).
//!
//! Drafters, in the order a slot asks them:
//! - grammar fast-forward: the tokens the request's grammar forces next (llguidance's
//!   `compute_ff_tokens`); always on, since a forced token is what sampling picks anyway;
//! - the n-gram (prompt lookup) drafter: the continuation of the most recent earlier occurrence
//!   of the longest suffix of the slot's tokens (`--draft-ngram K`); model-free.
//!
//! Verification keeps the target's distribution whatever the drafter: each row is sampled with
//! the request's own sampler exactly as a one-token step would be, and the draft is accepted
//! while the sampled token equals the drafted one (for a deterministic drafter that is the
//! standard acceptance rule). So greedy output is the same bytes with drafting on or off, and a
//! seeded request draws the same tokens.

use crate::ffi::Token;

/// Shortest and longest suffix the n-gram drafter matches. One token matches too often to be a
/// good guess (every `the`), so matches start at two.
pub const NGRAM_MIN: usize = 2;
pub const NGRAM_MAX: usize = 4;

/// Up to `k` tokens that followed the most recent earlier occurrence of the longest suffix of
/// `hist` (between [`NGRAM_MIN`] and [`NGRAM_MAX`] tokens long); empty when none occurs.
pub fn ngram(hist: &[Token], k: usize) -> Vec<Token> {
    if k == 0 {
        return Vec::new();
    }
    let len = hist.len();
    for n in (NGRAM_MIN..=NGRAM_MAX.min(len.saturating_sub(1))).rev() {
        let suffix = &hist[len - n..];
        // The most recent occurrence that ends before the suffix itself starts... or overlaps
        // it: any start below `len - n` has at least one token after it.
        let hit = (0..len - n).rev().find(|&i| &hist[i..i + n] == suffix);
        if let Some(i) = hit {
            let from = i + n;
            return hist[from..(from + k).min(len)].to_vec();
        }
    }
    Vec::new()
}

/// How many draft tokens a slot may put into a step: what the drafter asked for, bounded by the
/// tokens the request may still generate after the one this step samples (`left` counts that
/// one), the room left in the slot's context (`room` positions after its sampled token), and
/// its share of the batch.
pub fn budget(want: usize, left: u32, room: usize, share: usize) -> usize {
    want.min(left.saturating_sub(1) as usize)
        .min(room)
        .min(share)
}

/// The draft length every decoding slot of a step keeps, given what each drafted (`lens`, one
/// per decoding slot): the shortest, so every sequence brings the same token count and the step
/// stays one llama.cpp pass (engine/speculative.rs, `propose_all`). One slot keeps its own.
pub fn common_len(lens: &[usize]) -> usize {
    lens.iter().copied().min().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn ngram_continues_the_latest_longest_match() {
        let cases: &[(&[Token], usize, &[Token])] = &[
            (&[], 4, &[]),
            (&[1], 4, &[]),
            (&[1, 2], 4, &[]),
            // "1 2" occurred before: what followed it.
            (&[1, 2, 3, 4, 1, 2], 3, &[3, 4, 1]),
            (&[1, 2, 3, 4, 1, 2], 1, &[3]),
            // The continuation stops at the end of the history.
            (&[1, 2, 3, 1, 2], 8, &[3, 1, 2]),
            // The longer suffix wins over a later shorter match: "7 1 2" → 5, not "1 2" → 9.
            (&[7, 1, 2, 5, 1, 2, 9, 7, 1, 2], 1, &[5]),
            // Without a longer match the most recent two-token one wins.
            (&[1, 2, 5, 1, 2, 9, 3, 1, 2], 2, &[9, 3]),
            // A single repeated token is no match on its own.
            (&[1, 5, 6, 1], 4, &[]),
            // A run: overlapping occurrences count.
            (&[4, 4, 4], 2, &[4]),
            (&[1, 2, 3, 1, 2], 0, &[]),
        ];
        for &(hist, k, want) in cases {
            assert_eq!(ngram(hist, k), want, "{hist:?} k={k}");
        }
    }

    #[test]
    fn budget_bounds_the_draft_by_limit_room_and_share() {
        let cases = [
            // (want, left, room, share) → draft tokens
            ((4, 100, 100, 100), 4),
            ((4, 3, 100, 100), 2),
            ((4, 1, 100, 100), 0),
            ((4, 0, 100, 100), 0),
            ((4, 100, 1, 100), 1),
            ((4, 100, 0, 100), 0),
            ((4, 100, 100, 2), 2),
        ];
        for ((w, l, r, s), want) in cases {
            assert_eq!(budget(w, l, r, s), want, "{w} {l} {r} {s}");
        }
    }
}
