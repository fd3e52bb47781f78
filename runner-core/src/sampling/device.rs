//! Sampling from the device's top-K candidates (ffi/backend_sampling.rs): whether a request
//! may ([`needs_row`], a pure decision made once per request) and the draw itself
//! ([`Sampler::sample_top`]), which chooses what [`Sampler::sample`] chooses on the whole row
//! whenever the decision allowed it.
//!
//! Why the candidates suffice: they are the K best raw logits. Penalties that only lower logits
//! (repeat_penalty ≥ 1, presence and frequency ≥ 0) touch at most P distinct tokens, so at least
//! K − P candidates keep their logit, and that logit is ≥ every logit outside the set. The
//! request's k best after penalties (k = top_k, or 1 when greedy) are therefore among the
//! candidates whenever k + P ≤ K, and ordering them as `select::top_k` does (logit descending,
//! lower id first) hands the chain the same array. The one gap: the device breaks exact ties at
//! the K-th logit in its own order, which matters only if a run of K − k − P + 1 or more equal
//! logits reaches from the request's k-th place to the K-th.
//!
//! A mask (the grammar), log-probabilities (a softmax over the whole row), top_k ≤ 0 with a
//! temperature (the chain sees every token) and penalties that can raise a logit need the row.

use super::{penalized, Choice, Sampler};
use crate::select;
use crate::{Token, TokenData};

/// What the decision looks at, for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ask {
    pub greedy: bool,
    /// The request's top_k; 0 = none.
    pub top_k: usize,
    pub masked: bool,
    pub logprobs: bool,
    /// A penalty can raise a logit: repeat_penalty in (0, 1), negative presence or frequency.
    pub raising: bool,
    /// The most distinct tokens the penalties can touch at any step; 0 when they are off.
    pub penalized_max: usize,
}

/// Why a request needs its whole logits row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NeedsRow {
    Mask,
    Logprobs,
    /// Sampling without top_k: the chain sees every finite token.
    NoTopK,
    RaisingPenalty,
    /// k + penalised tokens exceed the device's K.
    TooWide,
}

/// None when the device's top `k_dev` candidates give the same draws as the whole row.
pub fn needs_row(a: &Ask, k_dev: usize) -> Option<NeedsRow> {
    if a.masked {
        return Some(NeedsRow::Mask);
    }
    if a.logprobs {
        return Some(NeedsRow::Logprobs);
    }
    let k = match (a.greedy, a.top_k) {
        (true, _) => 1,
        (false, 0) => return Some(NeedsRow::NoTopK),
        (false, k) => k,
    };
    if a.penalized_max > 0 && a.raising {
        return Some(NeedsRow::RaisingPenalty);
    }
    (k.saturating_add(a.penalized_max) > k_dev).then_some(NeedsRow::TooWide)
}

impl<C: super::Chain> Sampler<C> {
    /// This request's [`Ask`]; `limit` bounds the tokens it will generate.
    pub fn ask(&self, logprobs: bool, limit: u32) -> Ask {
        let p = &self.p;
        let on = self.penalties_active();
        Ask {
            greedy: self.chain.is_none(),
            top_k: self.k,
            masked: !self.mask.is_trivial(),
            logprobs,
            raising: (p.repeat_penalty > 0.0 && p.repeat_penalty < 1.0)
                || p.presence_penalty < 0.0
                || p.frequency_penalty < 0.0,
            // The window holds at most `window` tokens, and only the distinct ones now in it
            // plus those generated later can be distinct.
            penalized_max: if on {
                self.window
                    .min(self.counts.len().saturating_add(limit as usize))
            } else {
                0
            },
        }
    }

    /// Choose the next token from the device's candidates of this step (`ids[i]` has raw logit
    /// `logits[i]`, any order). Only for requests [`needs_row`] accepted: no mask, no
    /// log-probabilities.
    pub fn sample_top(&mut self, ids: &[Token], logits: &[f32]) -> Option<Choice> {
        let on = self.penalties_active();
        let (counts, p) = (&self.counts, &self.p);
        self.cands.clear();
        self.cands
            .extend(ids.iter().zip(logits).filter_map(|(&id, &l)| {
                let l = match counts.get(&id) {
                    Some(&c) if on => penalized(l, c, p),
                    _ => l,
                };
                l.is_finite().then_some(TokenData {
                    id,
                    logit: l,
                    p: 0.0,
                })
            }));
        let token = match &mut self.chain {
            None => select::best(&self.cands)?,
            Some(chain) => {
                select::cut(&mut self.cands, self.k);
                if self.cands.is_empty() {
                    return None;
                }
                let t = chain.select(&mut self.cands)?;
                chain.accept(t);
                t
            }
        };
        self.mask.commit(token);
        self.remember(token);
        Some(Choice {
            token,
            logprob: None,
            top: Vec::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::NoMask;
    use super::*;
    type Sampler = super::Sampler<super::super::test_chain::TestChain>;
    use runner_protocol::Sampling;

    #[test]
    fn the_decision_table() {
        let ok = Ask {
            top_k: 40,
            ..Ask::default()
        };
        let cases: &[(&str, Ask, usize, Option<NeedsRow>)] = &[
            ("plain top-k", ok, 64, None),
            ("k = K", ok, 40, None),
            ("k > K", ok, 39, Some(NeedsRow::TooWide)),
            (
                "greedy ignores top_k",
                Ask {
                    greedy: true,
                    top_k: 500,
                    ..ok
                },
                1,
                None,
            ),
            (
                "greedy with no top_k",
                Ask {
                    greedy: true,
                    top_k: 0,
                    ..ok
                },
                8,
                None,
            ),
            (
                "sampling without top_k",
                Ask { top_k: 0, ..ok },
                256,
                Some(NeedsRow::NoTopK),
            ),
            (
                "mask first",
                Ask {
                    masked: true,
                    logprobs: true,
                    ..ok
                },
                256,
                Some(NeedsRow::Mask),
            ),
            (
                "logprobs",
                Ask {
                    logprobs: true,
                    ..ok
                },
                256,
                Some(NeedsRow::Logprobs),
            ),
            (
                "penalised tokens count against K",
                Ask {
                    penalized_max: 24,
                    ..ok
                },
                64,
                None,
            ),
            (
                "one penalised token too many",
                Ask {
                    penalized_max: 25,
                    ..ok
                },
                64,
                Some(NeedsRow::TooWide),
            ),
            (
                "raising penalty",
                Ask {
                    raising: true,
                    penalized_max: 3,
                    ..ok
                },
                256,
                Some(NeedsRow::RaisingPenalty),
            ),
            (
                "raising but nothing to penalise",
                Ask {
                    raising: true,
                    ..ok
                },
                256,
                None,
            ),
        ];
        for (name, ask, k_dev, want) in cases {
            assert_eq!(needs_row(ask, *k_dev), *want, "{name}");
        }
    }

    #[test]
    fn ask_reads_the_request() {
        let base = Sampling {
            temperature: 0.8,
            top_k: 40,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            ..Sampling::default()
        };
        let prompt: Vec<Token> = vec![1, 2, 2, 3];
        let ask = |p: &Sampling, limit| {
            Sampler::new(p, &prompt, 4096, Box::new(NoMask)).ask(false, limit)
        };
        assert_eq!(
            ask(&base, 100),
            Ask {
                top_k: 40,
                ..Ask::default()
            }
        );
        let rep = Sampling {
            repeat_penalty: 1.1,
            ..base.clone()
        };
        // 3 distinct now + 10 to come, under the window of 64.
        assert_eq!(ask(&rep, 10).penalized_max, 13);
        assert_eq!(ask(&rep, 1000).penalized_max, 64);
        let raise = Sampling {
            presence_penalty: -0.5,
            ..base.clone()
        };
        assert!(ask(&raise, 10).raising);
        assert_eq!(ask(&raise, 10).penalized_max, 13);
        let greedy = Sampling {
            temperature: 0.0,
            ..base.clone()
        };
        assert!(ask(&greedy, 10).greedy);
        let mut s = Sampler::new(&base, &prompt, 4096, Box::new(NoMask));
        assert!(!s.ask(true, 1).masked && s.ask(true, 1).logprobs);
        s.mask = Box::new(Never);
        assert!(s.ask(false, 1).masked);
    }

    struct Never;
    impl crate::sampling::TokenMask for Never {
        fn apply(&mut self, _: &mut [f32]) {}
        fn commit(&mut self, _: Token) {}
    }

    /// A row of `n` logits on a grid (some exact ties, as real rows have few), fixed by `seed`.
    fn row(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x >> 40) % 4000) as f32 / 200.0 - 10.0
            })
            .collect()
    }

    /// The device's top `k_dev` of `row`, shuffled (the device returns them in no order), with
    /// ties at the K-th logit broken towards higher ids: the order the host would not pick.
    fn device_top(row: &[f32], k_dev: usize, seed: u64) -> (Vec<Token>, Vec<f32>) {
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(b.cmp(&a)));
        idx.truncate(k_dev);
        let mut x = seed | 1;
        for i in (1..idx.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            idx.swap(i, (x >> 33) as usize % (i + 1));
        }
        (
            idx.iter().map(|&i| i as Token).collect(),
            idx.iter().map(|&i| row[i]).collect(),
        )
    }

    /// Whenever `needs_row` accepts a request, drawing from the device's candidates chooses
    /// what the whole row chooses, step for step (penalties, greedy and seeded chains).
    #[test]
    fn candidates_draw_what_the_whole_row_draws() {
        let vocab = 5000;
        let k_dev = 96;
        let cases = [
            (0.8, 40, 0.95, 0.05, 1.0, 1.0, 0.0),
            (0.0, 40, 1.0, 0.0, 1.0, 1.3, 0.0),
            (1.2, 20, 0.9, 0.0, 0.8, 1.1, 0.2),
            (0.7, 5, 1.0, 0.1, 1.0, 1.0, 0.5),
        ];
        for (ci, &(temperature, top_k, top_p, min_p, typical_p, rep, freq)) in
            cases.iter().enumerate()
        {
            let p = Sampling {
                temperature,
                top_k,
                top_p,
                min_p,
                typical_p,
                repeat_penalty: rep,
                repeat_last_n: 48,
                frequency_penalty: freq,
                presence_penalty: freq / 2.0,
                seed: 7 + ci as i64,
            };
            // The prompt repeats tokens from the top of the first row, so penalties bite.
            let first = row(vocab, 100);
            let (top_ids, _) = device_top(&first, 30, 0);
            let prompt: Vec<Token> = top_ids.iter().copied().cycle().take(50).collect();
            let mut whole = Sampler::new(&p, &prompt, 4096, Box::new(NoMask));
            let mut top = Sampler::new(&p, &prompt, 4096, Box::new(NoMask));
            let limit = 40;
            assert_eq!(needs_row(&top.ask(false, limit), k_dev), None, "case {ci}");
            for step in 0..limit as u64 {
                let r = if step == 0 {
                    first.clone()
                } else {
                    row(vocab, step + 100)
                };
                let (ids, logits) = device_top(&r, k_dev, step);
                let a = whole.sample(&mut r.clone(), false, 0).unwrap();
                let b = top.sample_top(&ids, &logits).unwrap();
                assert_eq!(a, b, "case {ci} step {step}");
            }
        }
    }

    #[test]
    fn greedy_candidates_pick_the_best_with_the_lowest_id() {
        let p = Sampling {
            temperature: 0.0,
            repeat_penalty: 1.0,
            ..Sampling::default()
        };
        let mut s = Sampler::new(&p, &[], 16, Box::new(NoMask));
        let c = s
            .sample_top(&[9, 4, 7, 2], &[1.0, 3.0, 3.0, f32::INFINITY])
            .unwrap();
        assert_eq!(c.token, 4);
        assert_eq!(s.sample_top(&[], &[]), None);
    }
}
