//! Pure slot policy: which slot a prompt goes to, how much of its cache is reused, how a long
//! prompt is truncated, how a full context is shifted, which slots move so the busy ones stay on
//! consecutive sequence ids, and what each slot puts into a step. The engine applies these
//! decisions to the KV cache; keeping them pure keeps them table-tested.

// The engine-independent part (reuse, slot choice, fitting, shift) is runner-core's; it is
// re-exported here and table-tested below with the rest.
pub use runner_core::slots::{pick_slot, reuse_len, shift};

mod pad;
pub use pad::{padding, Padding, Seat};

/// Slot moves `(from, to)` that leave the busy slots (slot i = sequence i) on consecutive
/// sequence ids. With one KV stream per sequence llama.cpp cuts a step into one micro-batch per
/// run of consecutive ids (`split_equal`, sequential), each a full pass over the weights: a
/// single finished request in the middle doubled the step time of the 15 others on an H200.
/// Each move takes the highest busy slot into the lowest hole between the busy ones; none when
/// they already are consecutive (wherever the run starts).
pub fn compaction(busy: &[bool]) -> Vec<(usize, usize)> {
    let mut busy = busy.to_vec();
    let mut moves = Vec::new();
    loop {
        let (Some(lo), Some(hi)) = (busy.iter().position(|&b| b), busy.iter().rposition(|&b| b))
        else {
            return moves;
        };
        let Some(hole) = (lo..hi).find(|&i| !busy[i]) else {
            return moves;
        };
        busy[hole] = true;
        busy[hi] = false;
        moves.push((hi, hole));
    }
}

/// What one slot puts into a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    Nothing,
    /// Its sampled token, and the draft tokens after it (`compose`'s decode tokens).
    Decode,
    /// The next `n` tokens of its pending prompt.
    Prompt(usize),
}

/// Query rows of one sequence from which llama.cpp's CPU flash attention switches to its tiled
/// kernel (GGML_FA_TILE_Q in b11434), whose rounding depends on how the rows are cut.
pub const ATTN_TILE_ROWS: usize = 64;

/// One slot's work waiting for a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Work {
    /// Tokens to decode: its sampled token plus its draft, 0 when it has none.
    pub decode: usize,
    /// Pending prompt tokens (up to the next image).
    pub prompt: usize,
    /// The pending tokens end the prompt: the last of them yields the first token's logits.
    pub ends: bool,
}

impl Work {
    /// Prompt tokens before the one whose logits start generation.
    fn body(&self) -> usize {
        if self.ends {
            self.prompt.saturating_sub(1)
        } else {
            self.prompt
        }
    }
}

/// A composed step: each slot's part, whether it prefills, and whether a ready slot's last
/// prompt token was held back (`mixed`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub takes: Vec<Take>,
    pub prefill: bool,
    pub held: bool,
}

/// Steps in a row a ready slot may be held back on a GPU before it goes regardless (`mixed`):
/// the first token of a request waits at most this many steps for the prompts that arrived with
/// it.
pub const MAX_HOLD_STEPS: usize = 64;

/// Composes a step from each slot's [`Work`], in slot order, for a batch of `capacity` tokens
/// (the decode tokens of all slots must fit it).
///
/// `isolate` (CPU, batch-invariant): a step either decodes every waiting token or prefills,
/// nothing else, alternating when both wait (`prefilled_last`). A prefill step holds one chunk
/// of the first pending prompt, so a prompt is cut into the same chunks as when it runs alone
/// (llama.cpp's CPU attention tiles a sequence's rows from [`ATTN_TILE_ROWS`] on, and a step of
/// several sequences is cut into equal per-sequence micro-batches). Short prompts (fewer rows
/// than a tile, whole in the batch) are the exception: their rows are attended row by row
/// wherever they are cut, so all of them share one prefill step. Otherwise (GPU) see [`mixed`].
pub fn compose(
    slots: &[Work],
    capacity: usize,
    isolate: bool,
    prefilled_last: bool,
    held_steps: usize,
) -> Step {
    if !isolate {
        return mixed(slots, capacity, held_steps);
    }
    let decoders: usize = slots.iter().map(|s| s.decode).sum();
    let prompts = slots.iter().any(|s| s.prompt > 0);
    let mut takes = vec![Take::Nothing; slots.len()];
    let step = |takes, prefill| Step {
        takes,
        prefill,
        held: false,
    };
    if prompts && !(decoders > 0 && prefilled_last) {
        let short = |n: usize| n > 0 && n < ATTN_TILE_ROWS && n <= capacity;
        let i = slots
            .iter()
            .position(|s| s.prompt > 0)
            .expect("a pending prompt");
        if !short(slots[i].prompt) {
            takes[i] = Take::Prompt(slots[i].prompt.min(capacity));
            return step(takes, true);
        }
        let mut room = capacity;
        for (o, s) in takes.iter_mut().zip(slots) {
            if short(s.prompt) && s.prompt <= room {
                room -= s.prompt;
                *o = Take::Prompt(s.prompt);
            }
        }
        return step(takes, true);
    }
    for (o, s) in takes.iter_mut().zip(slots) {
        if s.decode > 0 {
            *o = Take::Decode;
        }
    }
    step(takes, false)
}

/// A GPU step: every waiting decode token, then the pending prompts in slot order in the rest
/// of the batch, except that a prompt's LAST token (the one whose logits give its first
/// generated token) is held back while other prompts still have tokens before their own last
/// one, for at most [`MAX_HOLD_STEPS`] steps in a row (`held_steps`).
///
/// Why: llama.cpp cuts a step of several sequences into equal per-sequence micro-batches, so a
/// prompt chunk beside decode tokens is a pass of its own, and a stream that starts decoding
/// while others prefill waits out every one of their chunks between two of its tokens. Holding
/// the first token of requests that arrive together until their prompts are in lets them decode
/// together at the batched rate (16 streams, 512-token prompts, num_batch 512 on an H200: the
/// prefill chunks otherwise cost the early streams ~20 % of their decode rate). A request that
/// arrives alone, or whose prompt is the last one pending, gets its first token in the step
/// that evaluates its prompt, as before: TTFT at one stream is unchanged.
pub fn mixed(slots: &[Work], capacity: usize, held_steps: usize) -> Step {
    let mut takes = vec![Take::Nothing; slots.len()];
    let decoders: usize = slots.iter().map(|s| s.decode).sum();
    let mut room = capacity.saturating_sub(decoders);
    for (o, s) in takes.iter_mut().zip(slots) {
        if s.decode > 0 {
            *o = Take::Decode;
        }
    }
    // Held long enough, ready slots go first; then the bodies, in slot order.
    let overdue = held_steps >= MAX_HOLD_STEPS;
    if overdue {
        for (o, s) in takes.iter_mut().zip(slots) {
            if s.decode == 0 && s.ends && s.prompt == 1 && room > 0 {
                room -= 1;
                *o = Take::Prompt(1);
            }
        }
    }
    let mut left = 0;
    // Decoders and released ready slots already have their part.
    for (o, s) in takes.iter_mut().zip(slots) {
        if *o != Take::Nothing {
            continue;
        }
        let n = s.body().min(room);
        if n > 0 {
            room -= n;
            *o = Take::Prompt(n);
        }
        left += s.body() - n;
    }
    // Last tokens go when no body is left after this step, or when held long enough.
    let release = left == 0 || overdue;
    let mut held = false;
    for (o, s) in takes.iter_mut().zip(slots) {
        if s.decode > 0 || !s.ends || s.prompt == 0 || *o == Take::Prompt(s.prompt) {
            continue;
        }
        let taken = match *o {
            Take::Prompt(n) => n,
            _ => 0,
        };
        if taken != s.body() {
            continue; // its body is not all in yet
        }
        if release && room > 0 {
            room -= 1;
            *o = Take::Prompt(taken + 1);
        } else {
            held = true;
        }
    }
    let prefill = takes.iter().any(|t| matches!(t, Take::Prompt(_)));
    Step {
        takes,
        prefill,
        held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::Token;
    use runner_core::slots::{fit_prompt, Cut, Overflow};

    #[test]
    fn reuse_keeps_the_common_prefix_but_reevaluates_the_last_prompt_token() {
        let cases: &[(&[Token], &[Token], bool, usize)] = &[
            (&[], &[1, 2, 3], true, 0),
            (&[1, 2, 9], &[1, 2, 3], true, 2),
            (&[1, 2, 3], &[1, 2, 3], true, 2),
            (&[1, 2, 3, 4, 5], &[1, 2, 3], true, 2),
            (&[1, 2], &[1, 2, 3, 4], true, 2),
            (&[1, 2, 3], &[1, 2, 3], false, 0),
            (&[5], &[5], true, 0),
        ];
        for (cache, prompt, on, want) in cases {
            assert_eq!(reuse_len(cache, prompt, *on), *want, "{cache:?} {prompt:?}");
        }
    }

    #[test]
    fn slot_with_longest_prefix_wins_then_emptiest_then_lowest() {
        let a: &[Token] = &[1, 2, 3];
        let b: &[Token] = &[1, 2, 3, 4, 5];
        let c: &[Token] = &[];
        let d: &[Token] = &[];
        assert_eq!(
            pick_slot([(0, a), (1, b), (2, c)], &[1, 2, 3, 4, 9]),
            Some(1)
        );
        assert_eq!(pick_slot([(0, a), (1, b), (2, c)], &[7]), Some(2));
        assert_eq!(pick_slot([(3, c), (1, d)], &[7]), Some(1));
        assert_eq!(
            pick_slot(std::iter::empty::<(usize, &[Token])>(), &[7]),
            None
        );
    }

    #[test]
    fn compaction_fills_holes_from_the_top_and_leaves_runs_alone() {
        let b = |s: &str| s.chars().map(|c| c == '#').collect::<Vec<_>>();
        let cases: &[(&str, &[(usize, usize)])] = &[
            ("", &[]),
            ("....", &[]),
            ("####", &[]),
            ("##..", &[]),
            (".##.", &[]),
            ("..##", &[]),
            ("#.##", &[(3, 1)]),
            ("#..#", &[(3, 1)]),
            ("#.#.#.#", &[(6, 1), (4, 3)]),
            (".#.#", &[(3, 2)]),
            ("#...............#", &[(16, 1)]),
        ];
        for (busy, want) in cases {
            let moves = compaction(&b(busy));
            assert_eq!(&moves, want, "{busy}");
            // After the moves the busy slots are one run, and as many as before.
            let mut after = b(busy);
            for &(from, to) in &moves {
                assert!(after[from] && !after[to], "{busy}: bad move {from}->{to}");
                after.swap(from, to);
            }
            let ids: Vec<usize> = (0..after.len()).filter(|&i| after[i]).collect();
            assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{busy}: {ids:?}");
        }
    }

    /// Slot states `(decode, prompt)` whose prompts end where their pending text ends.
    fn w(st: &[(usize, usize)]) -> Vec<Work> {
        st.iter()
            .map(|&(decode, prompt)| Work {
                decode,
                prompt,
                ends: true,
            })
            .collect()
    }

    fn step(takes: Vec<Take>, prefill: bool) -> Step {
        Step {
            takes,
            prefill,
            held: false,
        }
    }

    #[test]
    fn gpu_steps_hold_first_tokens_until_the_prompts_that_came_with_them_are_in() {
        use Take::*;
        // Alone: the whole prompt, last token included, in one step (TTFT unchanged).
        assert_eq!(
            mixed(&w(&[(0, 512)]), 512, 0),
            step(vec![Prompt(512)], true)
        );
        // A long prompt alone: its chunks, the last one with the last token.
        assert_eq!(
            mixed(&w(&[(0, 1000)]), 512, 0),
            step(vec![Prompt(512)], true)
        );
        assert_eq!(
            mixed(&w(&[(0, 488)]), 512, 0),
            step(vec![Prompt(488)], true)
        );
        // Three prompts arriving together: the first one's body fills the step, its last
        // token waits while the others are pending.
        let st = [(0, 512), (0, 512), (0, 512)];
        assert_eq!(
            mixed(&w(&st), 512, 0),
            Step {
                takes: vec![Prompt(511), Prompt(1), Nothing],
                prefill: true,
                held: true
            }
        );
        let st = [(0, 1), (0, 300), (0, 512)];
        assert_eq!(
            mixed(&w(&st), 512, 0),
            Step {
                takes: vec![Nothing, Prompt(299), Prompt(213)],
                prefill: true,
                held: true
            }
        );
        // ...until no body is left after the step: then every last token goes with it.
        let st = [(0, 1), (0, 1), (0, 299)];
        assert_eq!(
            mixed(&w(&st), 512, 0),
            step(vec![Prompt(1), Prompt(1), Prompt(299)], true)
        );
        // Decoders keep decoding in every step; ready slots join them once the bodies are in.
        let st = [(1, 0), (0, 1), (0, 600)];
        assert_eq!(
            mixed(&w(&st), 512, 0),
            Step {
                takes: vec![Decode, Nothing, Prompt(511)],
                prefill: true,
                held: true
            }
        );
        let st = [(1, 0), (0, 1), (0, 89)];
        assert_eq!(
            mixed(&w(&st), 512, 0),
            step(vec![Decode, Prompt(1), Prompt(89)], true)
        );
        // Held long enough, a ready slot goes even though bodies are pending.
        let st = [(0, 1), (0, 600)];
        assert_eq!(
            mixed(&w(&st), 512, MAX_HOLD_STEPS),
            step(vec![Prompt(1), Prompt(511)], true)
        );
        // Text before an image has no last token to hold: it is all body.
        let st = [
            Work {
                decode: 0,
                prompt: 40,
                ends: false,
            },
            Work {
                decode: 0,
                prompt: 600,
                ends: true,
            },
        ];
        assert_eq!(
            mixed(&st, 512, 0),
            step(vec![Prompt(40), Prompt(472)], true)
        );
        // The CPU path never holds.
        let st = [(0, 1), (0, 600)];
        assert!(!compose(&w(&st), 512, true, false, 0).held);
    }

    #[test]
    fn steps_are_composed_isolated_on_cpu_and_mixed_on_gpu() {
        use Take::*;
        let st = [(1, 0), (0, 700), (0, 0), (1, 0), (0, 30)];
        let cases: &[(bool, bool, usize, &[Take], bool)] = &[
            // isolated: a prefill step holds one prompt chunk only...
            (
                true,
                false,
                512,
                &[Nothing, Prompt(512), Nothing, Nothing, Nothing],
                true,
            ),
            // ...and after one, the waiting decoders go next.
            (
                true,
                true,
                512,
                &[Decode, Nothing, Nothing, Decode, Nothing],
                false,
            ),
            // mixed: decoders first, prompts share the rest in slot order.
            (
                false,
                false,
                512,
                &[Decode, Prompt(510), Nothing, Decode, Nothing],
                true,
            ),
            (
                false,
                false,
                2048,
                &[Decode, Prompt(700), Nothing, Decode, Prompt(30)],
                true,
            ),
            (
                false,
                false,
                2,
                &[Decode, Nothing, Nothing, Decode, Nothing],
                false,
            ),
        ];
        for &(isolate, last, cap, want, prefill) in cases {
            let Step {
                takes: got,
                prefill: p,
                ..
            } = compose(&w(&st), cap, isolate, last, 0);
            assert_eq!(
                (got.as_slice(), p),
                (want, prefill),
                "{isolate} {last} {cap}"
            );
        }
        // Only prompts waiting: isolated keeps prefilling; short prompts (whole, under a tile)
        // share a step, a long one goes alone, one chunk at a time.
        let st = [(0, 10), (0, 20), (0, 64), (0, 63)];
        assert_eq!(
            compose(&w(&st), 512, true, true, 0),
            step(vec![Prompt(10), Prompt(20), Nothing, Prompt(63)], true)
        );
        assert_eq!(
            compose(&w(&st), 40, true, true, 0),
            step(vec![Prompt(10), Prompt(20), Nothing, Nothing], true)
        );
        let st = [(0, 0), (0, 64), (0, 5)];
        assert_eq!(
            compose(&w(&st), 512, true, false, 0),
            step(vec![Nothing, Prompt(64), Nothing], true)
        );
        // A short prompt longer than the batch is cut like a long one.
        let st = [(0, 50), (0, 5)];
        assert_eq!(
            compose(&w(&st), 32, true, false, 0),
            step(vec![Prompt(32), Nothing], true)
        );
        // Only decoders: both modes decode.
        let st = [(1, 0), (0, 0), (1, 0)];
        for isolate in [true, false] {
            assert_eq!(
                compose(&w(&st), 512, isolate, false, 0),
                step(vec![Decode, Nothing, Decode], false)
            );
        }
        // Drafts take batch room from the prompts on a GPU (here 5 + 3 decode tokens).
        let st = [(5, 0), (0, 100), (3, 0)];
        assert_eq!(
            compose(&w(&st), 20, false, false, 0),
            step(vec![Decode, Prompt(12), Decode], true)
        );
    }

    #[test]
    fn long_prompts_are_truncated_keeping_head_and_tail_or_refused() {
        let p: Vec<Token> = (0..10).collect();
        let cut = Cut::Truncate;
        assert_eq!(fit_prompt(p.clone(), 16, 4, cut).unwrap(), p);
        // Ollama's cut: num_keep, then the newest tail, `n_ctx - (n_ctx - keep) / 2` tokens in
        // all, so half of the rest of the slot is left to generate in.
        assert_eq!(
            fit_prompt(p.clone(), 8, 2, cut).unwrap(),
            vec![0, 1, 7, 8, 9]
        );
        assert_eq!(fit_prompt(p.clone(), 8, 0, cut).unwrap(), vec![6, 7, 8, 9]);
        // num_keep is bounded by the slot less one; negative keeps as much of the head.
        for keep in [100, -1] {
            assert_eq!(
                fit_prompt(p.clone(), 8, keep, cut).unwrap(),
                vec![0, 1, 2, 3, 4, 5, 6]
            );
        }
        // Ollama's own case: 410 tokens into 256 positions with num_keep 4 and a BOS.
        let long: Vec<Token> = (0..410).collect();
        let cut410 = fit_prompt(long, 256, 5, cut).unwrap();
        assert_eq!(cut410.len(), 131);
        assert_eq!(&cut410[..6], &[0, 1, 2, 3, 4, 284]);
        // A prompt that fits is never refused, whatever the request allows.
        assert_eq!(fit_prompt(p.clone(), 11, 2, Cut::Refuse).unwrap(), p);
        for refuse in [Cut::Refuse, Cut::RefuseWithoutShift] {
            assert_eq!(
                fit_prompt(p.clone(), 8, 2, refuse),
                Err(Overflow {
                    prompt: 10,
                    limit: 7,
                    cut: refuse
                })
            );
        }
    }

    #[test]
    fn shift_keeps_num_keep_and_drops_half_the_rest() {
        assert_eq!(shift(100, 4), (4, 48));
        assert_eq!(shift(100, 0), (0, 50));
        assert_eq!(shift(100, -1), (50, 25));
        assert_eq!(shift(3, 4), (1, 1));
    }
}
