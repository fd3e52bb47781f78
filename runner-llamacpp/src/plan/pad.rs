//! Step padding (GPU): which idle sequences get a throwaway row so that a one-token decode step
//! keeps the shape of the steps before it while streams end one by one.
//!
//! Why: a step whose token count or sequence set differs from the last one makes llama.cpp build
//! its graph again and the CUDA backend capture a new CUDA graph. On the 8B bench model such a
//! step spent 6-9 ms in llama_decode's host part against 0.4-0.85 ms (native/gpu-results.md,
//! runs O-Q), and 16 JSON-schema streams, which end at different times, paid it 5-7 times per
//! 128 steps. A padded row costs its share of a memory-bound step (a few µs for one more row of
//! 16), so a step keeps the previous sequence set as long as more than half of it still decodes:
//! 16 streams ending one by one change shape 4 times (16, 8, 4, 2, 1) instead of 15.
//!
//! Padding is not free, though: run R (H100) measured the 8B's step at 6.97 ms with 8 rows and
//! 7.9 ms with 16 (~0.12 ms a row; below 8 rows ~0.4 ms a row), so padding 9 streams up to 16
//! for the rest of a round cost more than the one change it avoided. So padding is a ski
//! rental: a set is kept for at most [`PAD_BUDGET`] pad rows in all (rows times steps), about
//! what one change costs; then the step shrinks to the streams left. Streams that end close
//! together share one change, and a lone end costs at most twice what shrinking at once would.
//!
//! The padded rows go to idle sequences at the position after their cached tokens and leave the
//! KV right after the step, so an idle slot's prefix cache is unchanged.

use std::ops::Range;

/// Pad rows (summed over steps) a sequence set is kept for before the step shrinks: one change
/// of shape (6-9 ms of host time on the 8B) against ~0.12 ms per pad row and step.
pub const PAD_BUDGET: usize = 48;

/// What one slot (= sequence) is in a step, for padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seat {
    /// Decodes exactly one token.
    Decodes,
    /// Idle, with room in its sequence for one more row.
    Free,
    /// Idle, its sequence full.
    Full,
    /// Busy with anything else (a prompt chunk, a draft, a held first token): the step's shape
    /// is new anyway, so it is not padded.
    Busy,
}

/// A step's padding: the idle slots that get a row, the sequence range the step covers, and the
/// pad rows spent on that range so far (this step's included).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Padding {
    pub pads: Vec<usize>,
    pub covers: Range<usize>,
    pub spent: usize,
}

/// The padding of a step whose slots are `seats`, after the one-token decode steps before it
/// (`prev`: the range they covered and the pad rows spent on it). A step is padded back to
/// `prev.covers` when its decoders are consecutive, lie inside it, are more than half of it,
/// every other sequence of it is free, and the pads fit what is left of [`PAD_BUDGET`].
/// The result is what the next step compares with: unchanged by steps that are not one-token
/// decode steps (a draft or a prompt in between changes the shape of that step only).
pub fn padding(seats: &[Seat], prev: &Padding) -> Padding {
    let keep = Padding {
        pads: Vec::new(),
        ..prev.clone()
    };
    if seats.contains(&Seat::Busy) {
        return keep;
    }
    let decoding = |i: &usize| seats[*i] == Seat::Decodes;
    let (Some(lo), Some(hi)) = (
        (0..seats.len()).find(decoding),
        (0..seats.len()).rev().find(decoding),
    ) else {
        return keep;
    };
    let run = lo..hi + 1;
    let set = &prev.covers;
    let pads: Vec<usize> = set.clone().filter(|i| !run.contains(i)).collect();
    let consecutive = run.clone().all(|i| seats[i] == Seat::Decodes);
    let inside = set.start <= lo && hi < set.end;
    let worth = run.len() < set.len() && 2 * run.len() > set.len();
    let free = pads.iter().all(|&i| seats.get(i) == Some(&Seat::Free));
    let affordable = prev.spent + pads.len() <= PAD_BUDGET;
    if consecutive && inside && worth && free && affordable {
        Padding {
            spent: prev.spent + pads.len(),
            pads,
            covers: set.clone(),
        }
    } else {
        Padding {
            pads: Vec::new(),
            spent: if run == *set { prev.spent } else { 0 },
            covers: run,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Seat::*;

    /// (seats, previous cover) -> (pads, new cover)
    type Row = (&'static str, Range<usize>, &'static [usize], Range<usize>);

    fn seats(s: &str) -> Vec<Seat> {
        s.chars()
            .map(|c| match c {
                'd' => Decodes,
                '.' => Free,
                'f' => Full,
                _ => Busy,
            })
            .collect()
    }

    #[test]
    fn decode_steps_keep_the_last_sequence_set_while_more_than_half_of_it_decodes() {
        let table: &[Row] = &[
            // Nothing to compare with yet, or the same set again: no pads.
            ("dddd", 0..0, &[], 0..4),
            ("dddd", 0..4, &[], 0..4),
            // One of four ended (compaction left the run at the bottom): pad the top one.
            ("ddd.", 0..4, &[3], 0..4),
            // The lowest one ended and nothing moved: pad it.
            (".ddd", 0..4, &[0], 0..4),
            // Two of four is not more than half: the step shrinks and becomes the new set.
            ("dd..", 0..4, &[], 0..2),
            ("ddd..", 0..5, &[3, 4], 0..5),
            (
                "ddddddddd.......",
                0..16,
                &[9, 10, 11, 12, 13, 14, 15],
                0..16,
            ),
            ("dddddddd........", 0..16, &[], 0..8),
            // More decoders than before: a new set.
            ("dddd.", 0..3, &[], 0..4),
            // A decoder outside the last set: a new set.
            (".ddd", 0..3, &[], 1..4),
            // A sequence the pad needs is full: no pad, a new set.
            ("dddf", 0..4, &[], 0..3),
            // A full sequence outside the needed ones does not matter.
            ("ddd.f", 0..4, &[3], 0..4),
            // Decoders with a hole (no compaction): not padded.
            ("dd.d", 0..4, &[], 0..4),
        ];
        for (s, prev, pads, covers) in table {
            let got = padding(&seats(s), &after(prev.clone(), 0));
            assert_eq!(got.pads, *pads, "{s} after {prev:?}");
            assert_eq!(got.covers, *covers, "{s} after {prev:?}");
        }
    }

    fn after(covers: Range<usize>, spent: usize) -> Padding {
        Padding {
            pads: Vec::new(),
            covers,
            spent,
        }
    }

    #[test]
    fn a_set_is_kept_for_at_most_the_budget_in_pad_rows_then_the_step_shrinks() {
        // One stream of four ended: one pad row a step, PAD_BUDGET steps long.
        let mut p = after(0..4, 0);
        for step in 1..=PAD_BUDGET {
            p = padding(&seats("ddd."), &p);
            assert_eq!(
                (p.pads.as_slice(), p.spent),
                (&[3][..], step),
                "step {step}"
            );
        }
        p = padding(&seats("ddd."), &p);
        assert_eq!((p.pads.as_slice(), p.covers.clone()), (&[][..], 0..3));
        // The shrunk set starts a new budget.
        assert_eq!(p.spent, 0);
        p = padding(&seats("dd.."), &p);
        assert_eq!((p.pads.as_slice(), p.spent), (&[2][..], 1));
        // Two pads need two rows of budget.
        let p = padding(&seats("dd.."), &after(0..3, PAD_BUDGET - 1));
        assert_eq!((p.pads.as_slice(), p.covers), (&[2][..], 0..3));
        let p = padding(&seats("ddd.."), &after(0..5, PAD_BUDGET - 1));
        assert_eq!((p.pads.as_slice(), p.covers), (&[][..], 0..3));
    }

    #[test]
    fn steps_with_anything_but_one_token_decodes_are_not_padded_and_keep_the_set() {
        for s in ["ddb.", "b...", "dddb", "...."] {
            let got = padding(&seats(s), &after(0..4, 7));
            assert_eq!(got.pads, Vec::<usize>::new(), "{s}");
            assert_eq!((got.covers, got.spent), (0..4, 7), "{s}");
        }
    }
}
