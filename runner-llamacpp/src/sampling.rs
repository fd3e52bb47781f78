//! Token selection for one request: mask → penalties → (greedy | llama.cpp chain), plus
//! log-probabilities.
//!
//! The runner builds the candidate array from the logits itself, so a [`TokenMask`] (the grammar
//! engine, later) and the repetition penalties act on the raw logits before any llama.cpp
//! sampler sees them. The chain only `apply`s; this module calls `accept` exactly once per chosen
//! token (llama_sampler_sample would accept internally — never mixed with this path).

use crate::ffi::{SamplerChain, Token, TokenData};
use runner_protocol::Sampling;
use std::collections::VecDeque;

/// A constraint on the next token, applied to the logits before sampling.
pub trait TokenMask: Send {
    /// Forbid tokens by setting their logit to `f32::NEG_INFINITY`.
    fn apply(&mut self, logits: &mut [f32]);
    /// The token that was chosen (advance the constraint's state).
    fn commit(&mut self, token: Token);
}

/// No constraint.
pub struct NoMask;

impl TokenMask for NoMask {
    fn apply(&mut self, _: &mut [f32]) {}
    fn commit(&mut self, _: Token) {}
}

/// The chosen token and, when asked, its log-probability and the top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub token: Token,
    pub logprob: Option<f32>,
    pub top: Vec<(Token, f32)>,
}

pub struct Sampler {
    p: Sampling,
    /// None → greedy (temperature <= 0).
    chain: Option<SamplerChain>,
    mask: Box<dyn TokenMask>,
    /// Last `repeat_last_n` tokens (prompt tail, then generated), oldest first.
    history: VecDeque<Token>,
    window: usize,
    scratch: Vec<f32>,
    cands: Vec<TokenData>,
}

impl Sampler {
    /// `n_ctx` bounds the penalty window when `repeat_last_n` is -1 ("whole context").
    pub fn new(p: &Sampling, prompt: &[Token], n_ctx: usize, mask: Box<dyn TokenMask>) -> Sampler {
        let window = match p.repeat_last_n {
            n if n < 0 => n_ctx,
            n => n as usize,
        };
        let chain = (p.temperature > 0.0).then(|| {
            let mut c = SamplerChain::new();
            if p.top_k > 0 {
                c.top_k(p.top_k);
            }
            if p.typical_p > 0.0 && p.typical_p < 1.0 {
                c.typical(p.typical_p);
            }
            if p.top_p > 0.0 && p.top_p < 1.0 {
                c.top_p(p.top_p);
            }
            if p.min_p > 0.0 {
                c.min_p(p.min_p);
            }
            c.temp(p.temperature);
            // Negative seed = random: llama.cpp's LLAMA_DEFAULT_SEED (u32::MAX) draws one.
            let seed = if p.seed < 0 { u32::MAX } else { p.seed as u32 };
            c.dist(seed);
            c
        });
        let start = prompt.len().saturating_sub(window);
        Sampler {
            p: p.clone(),
            chain,
            mask,
            history: prompt[start..].iter().copied().collect(),
            window,
            scratch: Vec::new(),
            cands: Vec::new(),
        }
    }

    fn penalties_active(&self) -> bool {
        self.window > 0
            && (self.p.repeat_penalty != 1.0
                || self.p.frequency_penalty != 0.0
                || self.p.presence_penalty != 0.0)
    }

    /// Choose the next token from `logits`. `top_logprobs` > 0 or `logprobs` fills `Choice`.
    pub fn sample(
        &mut self,
        logits: &[f32],
        logprobs: bool,
        top_logprobs: usize,
    ) -> Option<Choice> {
        self.scratch.clear();
        self.scratch.extend_from_slice(logits);
        self.mask.apply(&mut self.scratch);
        if self.penalties_active() {
            apply_penalties(&mut self.scratch, &self.history, &self.p);
        }
        let token = match &mut self.chain {
            None => argmax(&self.scratch)?,
            Some(chain) => {
                self.cands.clear();
                self.cands.extend(
                    self.scratch
                        .iter()
                        .enumerate()
                        .filter(|(_, l)| l.is_finite())
                        .map(|(i, &l)| TokenData {
                            id: i as Token,
                            logit: l,
                            p: 0.0,
                        }),
                );
                if self.cands.is_empty() {
                    return None;
                }
                let t = chain.select(&mut self.cands)?;
                chain.accept(t);
                t
            }
        };
        self.mask.commit(token);
        if self.window > 0 {
            if self.history.len() == self.window {
                self.history.pop_front();
            }
            self.history.push_back(token);
        }
        let (logprob, top) = if logprobs || top_logprobs > 0 {
            log_probs(&self.scratch, token, top_logprobs)
        } else {
            (None, Vec::new())
        };
        Some(Choice {
            token,
            logprob,
            top,
        })
    }
}

/// llama.cpp's penalty semantics: repeat penalty divides positive logits and multiplies negative
/// ones; frequency subtracts count × f; presence subtracts p once per seen token.
fn apply_penalties(logits: &mut [f32], history: &VecDeque<Token>, p: &Sampling) {
    let mut counts: std::collections::HashMap<Token, u32> = std::collections::HashMap::new();
    for &t in history {
        *counts.entry(t).or_default() += 1;
    }
    for (t, c) in counts {
        let Some(l) = logits.get_mut(t as usize) else {
            continue;
        };
        if !l.is_finite() {
            continue;
        }
        if p.repeat_penalty != 1.0 && p.repeat_penalty > 0.0 {
            *l = if *l <= 0.0 {
                *l * p.repeat_penalty
            } else {
                *l / p.repeat_penalty
            };
        }
        *l -= c as f32 * p.frequency_penalty + p.presence_penalty;
    }
}

/// Index of the largest finite logit; ties go to the lowest id (deterministic).
fn argmax(logits: &[f32]) -> Option<Token> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as Token)
}

/// Log-softmax of `token` and the `top` most likely tokens, over the masked, penalised logits.
fn log_probs(logits: &[f32], token: Token, top: usize) -> (Option<f32>, Vec<(Token, f32)>) {
    let max = logits
        .iter()
        .copied()
        .filter(|l| l.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return (None, Vec::new());
    }
    let sum: f64 = logits
        .iter()
        .filter(|l| l.is_finite())
        .map(|&l| ((l - max) as f64).exp())
        .sum();
    let lse = max + sum.ln() as f32;
    let lp = logits.get(token as usize).map(|&l| l - lse);
    let mut idx: Vec<usize> = (0..logits.len())
        .filter(|&i| logits[i].is_finite())
        .collect();
    let n = top.min(idx.len());
    if n > 0 && n < idx.len() {
        idx.select_nth_unstable_by(n - 1, |&a, &b| logits[b].total_cmp(&logits[a]));
    }
    idx.truncate(n);
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    (
        lp,
        idx.into_iter()
            .map(|i| (i as Token, logits[i] - lse))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::{Arc, Mutex};

    /// Forbids fixed tokens and records what it was told was chosen.
    struct Forbid(Vec<Token>, Arc<Mutex<Vec<Token>>>);
    impl TokenMask for Forbid {
        fn apply(&mut self, logits: &mut [f32]) {
            for &t in &self.0 {
                logits[t as usize] = f32::NEG_INFINITY;
            }
        }
        fn commit(&mut self, t: Token) {
            self.1.lock().unwrap().push(t);
        }
    }
    fn forbid(t: Vec<Token>) -> Box<Forbid> {
        Box::new(Forbid(t, Arc::default()))
    }

    fn params(temperature: f32, seed: i64) -> Sampling {
        Sampling {
            temperature,
            seed,
            repeat_penalty: 1.0,
            ..Sampling::default()
        }
    }

    #[test]
    fn greedy_takes_argmax_and_the_mask_is_honoured() {
        let logits = [0.0, 5.0, 4.0, 1.0];
        let mut s = Sampler::new(&params(0.0, 0), &[], 16, Box::new(NoMask));
        assert_eq!(s.sample(&logits, false, 0).unwrap().token, 1);
        let mut s = Sampler::new(&params(0.0, 0), &[], 16, forbid(vec![1]));
        assert_eq!(s.sample(&logits, false, 0).unwrap().token, 2);
    }

    #[test]
    fn stochastic_sampling_never_picks_a_masked_token() {
        // Token 0 dominates; with it masked, 200 seeded draws must avoid it.
        let logits = [10.0, 1.0, 1.0, 1.0];
        for seed in 0..200 {
            let mut s = Sampler::new(&params(1.5, seed), &[], 16, forbid(vec![0]));
            let c = s.sample(&logits, false, 0).unwrap();
            assert_ne!(c.token, 0, "seed {seed}");
        }
    }

    #[test]
    fn same_seed_same_choices() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(&params(1.0, seed), &[], 16, Box::new(NoMask));
            (0..20)
                .map(|_| s.sample(&logits, false, 0).unwrap().token)
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(42), draw(42));
        assert_ne!(draw(42), draw(43));
    }

    #[test]
    fn mask_is_told_each_choice_exactly_once() {
        let logits = [0.0, 2.0, 1.0, 0.5];
        for temperature in [0.0, 0.7] {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let mask = Box::new(Forbid(vec![1], seen.clone()));
            let mut s = Sampler::new(&params(temperature, 7), &[], 16, mask);
            let got: Vec<Token> = (0..3)
                .map(|_| s.sample(&logits, false, 0).unwrap().token)
                .collect();
            assert_eq!(*seen.lock().unwrap(), got, "temperature {temperature}");
        }
    }

    #[test]
    fn repeat_penalty_moves_greedy_off_a_seen_token() {
        let logits = [0.0, 2.0, 1.9];
        let mut p = params(0.0, 0);
        p.repeat_penalty = 1.5;
        p.repeat_last_n = 4;
        let mut s = Sampler::new(&p, &[1], 16, Box::new(NoMask));
        assert_eq!(s.sample(&logits, false, 0).unwrap().token, 2);
        // Frequency and presence penalties subtract.
        let mut logits = [0.0, 2.0, 1.0];
        let p = Sampling {
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            ..params(0.0, 0)
        };
        apply_penalties(&mut logits, &[1, 1].into_iter().collect(), &p);
        assert_eq!(logits, [0.0, 2.0 - 1.0 - 0.25, 1.0]);
    }

    #[test]
    fn logprobs_are_a_log_softmax_with_sorted_top() {
        let logits = [1.0f32, 3.0, 2.0];
        let (lp, top) = log_probs(&logits, 1, 2);
        let z: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((lp.unwrap() - (3.0f32.exp() / z).ln()).abs() < 1e-5);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2]);
        assert!(top[0].1 > top[1].1);
    }
}
