//! Speculative drafting policy both runners share (runner-llamacpp's engine/draft.rs and
//! runner-mlx's engine put the drafts into their steps and verify them): the model-free n-gram
//! (prompt lookup) drafter, a draft's budget, and how long a draft pays ([`pace`]).
//!
//! Verification keeps the target's distribution whatever the drafter: each row is sampled with
//! the request's own sampler exactly as a one-token step would be, and the draft is accepted
//! while the sampled token equals the drafted one, so greedy output is the same bytes with
//! drafting on or off wherever the engine computes a row the same in either step.

pub mod pace;

use crate::Token;
use pace::{Pace, StepCost};

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

/// A slot's n-gram draft after its sampled token `next`: up to `k` tokens continuing `hist`
/// then `next` ([`ngram`]), cut to the length that pays at the measured step cost with
/// `slots` decoding slots in the step ([`Pace::len`]). `hist` is left as it was.
pub fn ngram_paced(
    hist: &mut Vec<Token>,
    next: Token,
    k: usize,
    pace: &mut Pace,
    cost: &StepCost,
    slots: usize,
) -> Vec<Token> {
    hist.push(next);
    let mut out = ngram(hist, k);
    hist.pop();
    if !out.is_empty() {
        out.truncate(pace.len(out.len(), cost.rho(slots), cost.steps(), cost.is_shaped()));
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

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
