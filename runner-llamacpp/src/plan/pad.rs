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
//! The padded rows go to idle sequences at the position after their cached tokens and leave the
//! KV right after the step, so an idle slot's prefix cache is unchanged.

use std::ops::Range;

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

/// A step's padding: the idle slots that get a row, and the sequence range the step covers
/// (`Range::default()` when it is not a one-token decode step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Padding {
    pub pads: Vec<usize>,
    pub covers: Range<usize>,
}

/// The padding of a step whose slots are `seats`, after a one-token decode step that covered
/// the sequences `prev`. A step is padded back to `prev` when its decoders are consecutive,
/// lie inside `prev`, are more than half of it, and every other sequence of `prev` is free.
/// `covers` is what the next step compares with: unchanged by steps that are not one-token
/// decode steps (a draft or a prompt in between changes the shape of that step only).
pub fn padding(seats: &[Seat], prev: &Range<usize>) -> Padding {
    let keep = Padding {
        pads: Vec::new(),
        covers: prev.clone(),
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
    let pads: Vec<usize> = prev.clone().filter(|i| !run.contains(i)).collect();
    let consecutive = run.clone().all(|i| seats[i] == Seat::Decodes);
    let inside = prev.start <= lo && hi < prev.end;
    let worth = run.len() < prev.len() && 2 * run.len() > prev.len();
    let free = pads.iter().all(|&i| seats.get(i) == Some(&Seat::Free));
    if consecutive && inside && worth && free {
        Padding {
            pads,
            covers: prev.clone(),
        }
    } else {
        Padding {
            pads: Vec::new(),
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
            let got = padding(&seats(s), prev);
            assert_eq!(got.pads, *pads, "{s} after {prev:?}");
            assert_eq!(got.covers, *covers, "{s} after {prev:?}");
        }
    }

    #[test]
    fn steps_with_anything_but_one_token_decodes_are_not_padded_and_keep_the_set() {
        for s in ["ddb.", "b...", "dddb", "...."] {
            let got = padding(&seats(s), &(0..4));
            assert_eq!(got.pads, Vec::<usize>::new(), "{s}");
            assert_eq!(got.covers, 0..4, "{s}");
        }
    }
}
