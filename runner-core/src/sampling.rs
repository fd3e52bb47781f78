//! Token selection for one request: mask → penalties → (greedy | the engine's [`Chain`]), plus
//! log-probabilities.
//!
//! The sampler works in place on the engine's logits row, so a [`TokenMask`] (the grammar
//! engine) and the repetition penalties act on the raw logits before any chain sampler sees
//! them, and no step copies the vocabulary. Cost per token: greedy is one argmax pass; with
//! `top_k > 0` one selection pass keeps the k best and the chain (typical, top_p, min_p, temp,
//! dist — Ollama's order) runs on those k; penalties touch only the recent tokens' logits. Only
//! `top_k <= 0` with a temperature hands the chain every finite token. The chain only selects;
//! this module calls `accept` exactly once per chosen token.

use crate::select;
use crate::{Token, TokenData};
use runner_protocol::Sampling;
use std::collections::{HashMap, VecDeque};

mod device;
pub use device::needs_row;
#[cfg(test)]
mod test_chain;

/// A constraint on the next token, applied to the logits before sampling.
pub trait TokenMask: Send {
    /// Forbid tokens by setting their logit to `f32::NEG_INFINITY`.
    fn apply(&mut self, logits: &mut [f32]);
    /// Either forbid tokens as `apply` does and return None, or leave `logits` alone and return
    /// the allowed ids (ascending) when they are few: then nothing vocabulary-sized is written
    /// and the sampler reads only those entries.
    fn apply_sparse(&mut self, logits: &mut [f32]) -> Option<Vec<Token>> {
        self.apply(logits);
        None
    }
    /// The allowed set as bit words (token `t` allowed when bit `t % 32` of word `t / 32` is
    /// set), when it is large enough that writing it into a row costs more than checking the
    /// tokens a sample picks (see `Sampler::sample_checked`); None = `apply_sparse` decides.
    /// Does not advance the state: `apply`/`apply_sparse` may still follow.
    fn dense_bits(&mut self) -> Option<&[u32]> {
        None
    }
    /// The token that was chosen (advance the constraint's state).
    fn commit(&mut self, token: Token);
    /// The bytes the constraint forces next, after every committed token (empty when none are
    /// forced; a special token is `0xFF` + its text, as in llguidance). The engine drafts their
    /// tokens (grammar fast-forward): sampling still chooses each token, so forced text is only
    /// evaluated sooner, never chosen differently.
    fn forced(&mut self) -> Vec<u8> {
        Vec::new()
    }
    /// Send what `commit` held back (a mask that defers its commits, as the grammar's does
    /// behind `grammar::gate`, until the engine has sampled a step's every row).
    fn flush(&mut self) {}
    /// True only when the mask never forbids anything (then the device's top-K candidates
    /// suffice: sampling/device.rs).
    fn is_trivial(&self) -> bool {
        false
    }
}

/// Sets every logit outside `ids` (ascending, unique) to -inf.
pub(crate) fn keep_only(logits: &mut [f32], ids: &[Token]) {
    let mut next = 0usize;
    for &id in ids {
        let id = id as usize;
        if id >= logits.len() {
            break;
        }
        logits[next..id].fill(f32::NEG_INFINITY);
        next = id + 1;
    }
    if next < logits.len() {
        logits[next..].fill(f32::NEG_INFINITY);
    }
}

/// No constraint.
pub struct NoMask;

impl TokenMask for NoMask {
    fn apply(&mut self, _: &mut [f32]) {}
    fn commit(&mut self, _: Token) {}
    fn is_trivial(&self) -> bool {
        true
    }
}

/// The stochastic part of sampling (temperature > 0), in Ollama's order: top_k, typical, top_p,
/// min_p, temperature, then a seeded draw. runner-llamacpp's is llama.cpp's sampler chain.
pub trait Chain: Send + Sized {
    /// The chain for `p` (only called with `p.temperature > 0`). A negative seed draws a random
    /// one.
    fn build(p: &Sampling) -> Self;
    /// Select one of `cands` (the request's top_k best by logit, descending with the lower id
    /// first on ties; every finite token when top_k <= 0). May reorder or rewrite them.
    fn select(&mut self, cands: &mut [TokenData]) -> Option<Token>;
    /// `t` was chosen (advances stateful samplers); called exactly once per chosen token.
    fn accept(&mut self, t: Token);
}

/// The chosen token and, when asked, its log-probability and the top alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub token: Token,
    pub logprob: Option<f32>,
    pub top: Vec<(Token, f32)>,
}

pub struct Sampler<C: Chain> {
    p: Sampling,
    /// None → greedy (temperature <= 0).
    chain: Option<C>,
    /// The chain's top_k, taken by selection before the chain runs; 0 → no top-k.
    k: usize,
    mask: Box<dyn TokenMask>,
    /// Last `repeat_last_n` tokens (prompt tail, then generated), oldest first.
    history: VecDeque<Token>,
    /// How often each token occurs in `history` (kept in step with it; no zero entries).
    counts: HashMap<Token, u32>,
    window: usize,
    cands: Vec<TokenData>,
    /// The next sample may only choose this token (when the mask allows it): `restrict_next`.
    only: Option<Token>,
}

impl<C: Chain> Sampler<C> {
    /// `n_ctx` bounds the penalty window when `repeat_last_n` is -1 ("whole context").
    pub fn new(p: &Sampling, prompt: &[Token], n_ctx: usize, mask: Box<dyn TokenMask>) -> Self {
        let window = match p.repeat_last_n {
            n if n < 0 => n_ctx,
            n => n as usize,
        };
        let chain = (p.temperature > 0.0).then(|| C::build(p));
        let mut s = Sampler {
            p: p.clone(),
            chain,
            k: p.top_k.max(0) as usize,
            mask,
            history: VecDeque::with_capacity(window.min(4096)),
            counts: HashMap::new(),
            window,
            cands: Vec::new(),
            only: None,
        };
        for &t in &prompt[prompt.len().saturating_sub(window)..] {
            s.remember(t);
        }
        s
    }

    /// Hand the mask's held-back commit over ([`TokenMask::flush`]).
    pub fn flush(&mut self) {
        self.mask.flush();
    }

    /// The bytes the mask forces next ([`TokenMask::forced`]).
    pub fn forced(&mut self) -> Vec<u8> {
        self.mask.forced()
    }

    /// The next `sample` may only choose `t`, if the mask allows it (else the mask alone
    /// decides). The engine writes forced text in the model's own tokenization this way. A
    /// restricted sample is no draw: the chain sees the token only through `accept`, so its
    /// random state is the same whether the token was sampled from a row or taken by
    /// [`Sampler::take_forced`].
    pub fn restrict_next(&mut self, t: Token) {
        self.only = Some(t);
    }

    /// Take `t`, which the grammar forces, without a logits row: what a sample restricted to
    /// `t` chooses (`restrict_next`), with no log-probability. The engine evaluates forced
    /// tokens this way (grammar fast-forward); `t` must be a token the mask allows.
    pub fn take_forced(&mut self, t: Token) -> Choice {
        self.only = None;
        if let Some(chain) = &mut self.chain {
            chain.accept(t);
        }
        self.mask.commit(t);
        self.remember(t);
        Choice {
            token: t,
            logprob: None,
            top: Vec::new(),
        }
    }

    /// The request is constrained (its mask may forbid tokens).
    pub fn constrained(&self) -> bool {
        !self.mask.is_trivial()
    }

    fn penalties_active(&self) -> bool {
        self.window > 0
            && (self.p.repeat_penalty != 1.0
                || self.p.frequency_penalty != 0.0
                || self.p.presence_penalty != 0.0)
    }

    /// Push `t` into the penalty window, dropping the oldest token when it is full.
    fn remember(&mut self, t: Token) {
        if self.window == 0 {
            return;
        }
        if self.history.len() == self.window {
            if let Some(old) = self.history.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.history.push_back(t);
        *self.counts.entry(t).or_default() += 1;
    }

    /// Choose the next token from `logits` (this step's row; the mask and penalties are written
    /// into it). `logprobs` or `top_logprobs` > 0 fills `Choice`.
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        logprobs: bool,
        top_logprobs: usize,
    ) -> Option<Choice> {
        let lp = logprobs || top_logprobs > 0;
        if self.only.is_none() && !lp {
            match self.sample_checked(logits) {
                Checked::Chose(token) => {
                    self.mask.commit(token);
                    self.remember(token);
                    return Some(Choice {
                        token,
                        logprob: None,
                        top: Vec::new(),
                    });
                }
                Checked::NoneLeft => return None,
                Checked::Untried => {}
            }
        }
        let mut allowed = self.mask.apply_sparse(logits);
        let mut only = None;
        if let Some(f) = self.only.take() {
            let ok = match &allowed {
                Some(ids) => ids.binary_search(&f).is_ok(),
                None => logits.get(f as usize).is_some_and(|l| l.is_finite()),
            };
            if ok {
                allowed = Some(vec![f]);
                only = Some(f);
            }
        }
        if self.penalties_active() && only.is_none() {
            apply_penalties(logits, &self.counts, &self.p);
        }
        let token = match (&mut self.chain, &allowed) {
            // The one allowed token: no draw (see `restrict_next`).
            (chain, _) if let Some(t) = only => {
                if let Some(chain) = chain {
                    chain.accept(t);
                }
                t
            }
            (None, None) => select::argmax(logits)?,
            (None, Some(ids)) => select::argmax_of(logits, ids)?,
            (Some(chain), _) => {
                match &allowed {
                    Some(ids) => select::top_k_of(logits, ids, self.k, &mut self.cands),
                    None if self.k > 0 => select::top_k(logits, self.k, &mut self.cands),
                    None => {
                        self.cands.clear();
                        self.cands.extend(
                            logits
                                .iter()
                                .enumerate()
                                .filter(|(_, l)| l.is_finite())
                                .map(|(i, &l)| TokenData {
                                    id: i as Token,
                                    logit: l,
                                    p: 0.0,
                                }),
                        );
                    }
                }
                if self.cands.is_empty() {
                    return None;
                }
                let t = chain.select(&mut self.cands)?;
                chain.accept(t);
                t
            }
        };
        if let (Some(ids), true) = (&allowed, lp) {
            // Log-probabilities are over the masked row: write the mask now, only when asked.
            keep_only(logits, ids);
        }
        self.mask.commit(token);
        self.remember(token);
        let (logprob, top) = if lp {
            select::log_probs(logits, token, top_logprobs, &mut self.cands)
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

/// What [`Sampler::sample_checked`] did.
enum Checked {
    /// It chose this token (not yet committed or remembered).
    Chose(Token),
    /// The chain chose nothing from the candidates (as `sample` returns None).
    NoneLeft,
    /// The mask is not dense or the sampler not greedy / top-k: `logits` is untouched.
    Untried,
}

impl<C: Chain> Sampler<C> {
    /// Sampling under a dense mask without writing it into the row, with exactly the masked
    /// row's result.
    /// - Greedy: the row's argmax, when allowed, is the masked row's argmax (same tie rule);
    ///   else the best allowed entry (`select::top_k_allowed` with k = 1).
    /// - Top-k: the best `k` allowed entries (`select::top_k_allowed`), in the order `top_k`
    ///   gives over the masked row, so the chain draws from the same candidates.
    ///
    /// A constrained JSON string allows most of a vocabulary: writing -inf over a 128k row costs
    /// tens of µs per row, and reading it again as much (H200, 16 constrained streams: sample
    /// 0.29 → 0.51 ms a step). Checking the top `2k` of the unmasked row instead failed whenever
    /// the mask forbade more than half of them (the byte-pair vocabulary of the GPU bench's
    /// random model allows ~1 token in 5 inside a string), and paid both.
    fn sample_checked(&mut self, logits: &mut [f32]) -> Checked {
        if self.chain.is_some() && self.k == 0 {
            return Checked::Untried;
        }
        let penalize = self.penalties_active();
        let Some(bits) = self.mask.dense_bits() else {
            return Checked::Untried;
        };
        if penalize {
            apply_penalties(logits, &self.counts, &self.p);
        }
        let allowed = |t: Token| {
            bits.get(t as usize / 32)
                .is_some_and(|w| w & (1 << (t % 32)) != 0)
        };
        match &mut self.chain {
            None => match select::argmax(logits) {
                Some(t) if allowed(t) => Checked::Chose(t),
                _ => {
                    select::top_k_allowed(logits, 1, bits, &mut self.cands);
                    self.cands
                        .first()
                        .map_or(Checked::NoneLeft, |c| Checked::Chose(c.id))
                }
            },
            Some(chain) => {
                select::top_k_allowed(logits, self.k, bits, &mut self.cands);
                if self.cands.is_empty() {
                    return Checked::NoneLeft;
                }
                match chain.select(&mut self.cands) {
                    Some(t) => {
                        chain.accept(t);
                        Checked::Chose(t)
                    }
                    None => Checked::NoneLeft,
                }
            }
        }
    }
}

/// llama.cpp's penalty semantics: repeat penalty divides positive logits and multiplies negative
/// ones; frequency subtracts count × f; presence subtracts p once per seen token. Only the
/// logits of tokens in `counts` are touched.
fn apply_penalties(logits: &mut [f32], counts: &HashMap<Token, u32>, p: &Sampling) {
    for (&t, &c) in counts {
        if let Some(l) = logits.get_mut(t as usize) {
            *l = penalized(*l, c, p);
        }
    }
}

/// One logit after the penalties for a token seen `count` times; non-finite logits (masked)
/// stay as they are.
fn penalized(l: f32, count: u32, p: &Sampling) -> f32 {
    if !l.is_finite() {
        return l;
    }
    let mut l = l;
    if p.repeat_penalty != 1.0 && p.repeat_penalty > 0.0 {
        l = if l <= 0.0 {
            l * p.repeat_penalty
        } else {
            l / p.repeat_penalty
        };
    }
    l - (count as f32 * p.frequency_penalty + p.presence_penalty)
}

/// Timing of `Sampler::sample` at real vocabulary sizes. Run in release:
/// `cargo test --release -p runner-core --lib sample_timing -- --ignored --nocapture`.
#[cfg(test)]
mod timing {
    use super::*;
    type Sampler = super::Sampler<super::test_chain::TestChain>;
    use std::time::Instant;

    /// Gaussian-ish logits (sum of uniforms), fixed by `seed`.
    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed.wrapping_add(0x9E3779B97F4A7C15);
        let mut u = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 24) as f32
        };
        (0..n)
            .map(|_| (u() + u() + u() + u() - 2.0) * 4.0)
            .collect()
    }

    type MakeMask = fn(usize) -> Box<dyn TokenMask>;

    /// A dense mask allowing one token in five (a JSON string over a byte-pair vocabulary).
    struct Fifth(Vec<u32>);

    impl Fifth {
        fn new(n: usize) -> Fifth {
            Fifth(
                (0..n.div_ceil(32))
                    .map(|i| {
                        (0..32)
                            .filter(|b| (i * 32 + b) % 5 == 2)
                            .fold(0, |w, b| w | 1 << b)
                    })
                    .collect(),
            )
        }
    }

    impl TokenMask for Fifth {
        fn apply(&mut self, logits: &mut [f32]) {
            for (i, l) in logits.iter_mut().enumerate() {
                if self.0[i / 32] & (1 << (i % 32)) == 0 {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        fn dense_bits(&mut self) -> Option<&[u32]> {
            Some(&self.0)
        }
        fn commit(&mut self, _: Token) {}
    }

    #[test]
    #[ignore = "timing report, not a check; run in release"]
    fn sample_timing() {
        let base = Sampling::default();
        let cases: Vec<(&str, Sampling)> = vec![
            (
                "greedy, no penalty",
                Sampling {
                    temperature: 0.0,
                    repeat_penalty: 1.0,
                    ..base.clone()
                },
            ),
            (
                "greedy, repeat 1.1/64",
                Sampling {
                    temperature: 0.0,
                    repeat_penalty: 1.1,
                    repeat_last_n: 64,
                    ..base.clone()
                },
            ),
            (
                "t0.8 k40 p0.95 minp0.05",
                Sampling {
                    temperature: 0.8,
                    top_k: 40,
                    top_p: 0.95,
                    min_p: 0.05,
                    seed: 1,
                    ..base.clone()
                },
            ),
            (
                "t0.8 k0 p0.9 (full vocab)",
                Sampling {
                    temperature: 0.8,
                    top_k: 0,
                    top_p: 0.9,
                    seed: 1,
                    ..base.clone()
                },
            ),
        ];
        let prompt: Vec<Token> = (0..64).map(|i| i * 997).collect();
        for vocab in [128_256usize, 262_144] {
            let rows: Vec<Vec<f32>> = (0..8).map(|s| logits(vocab, s)).collect();
            let mut buf = rows[0].clone();
            let masks: [(&str, MakeMask); 2] = [
                ("", |_| Box::new(NoMask)),
                (", 1/5 allowed", |n| Box::new(Fifth::new(n))),
            ];
            for ((name, p), (masked, mask)) in
                cases.iter().flat_map(|c| masks.iter().map(move |m| (c, m)))
            {
                let name = format!("{name}{masked}");
                let mut s = Sampler::new(p, &prompt, 4096, mask(vocab));
                // Median and best of 300 (after 20 warm-up draws): on a shared machine the
                // mean mostly measures preemption.
                let mut ns: Vec<u128> = Vec::new();
                for i in 0..320 {
                    buf.copy_from_slice(&rows[i % rows.len()]);
                    let t = Instant::now();
                    let c = s.sample(&mut buf, false, 0);
                    let dt = t.elapsed().as_nanos();
                    assert!(c.is_some());
                    if i >= 20 {
                        ns.push(dt);
                    }
                }
                ns.sort_unstable();
                println!(
                    "vocab {vocab:>7} {name:<28} median {:>8.1} us, best {:>8.1} us",
                    ns[ns.len() / 2] as f64 / 1000.0,
                    ns[0] as f64 / 1000.0
                );
            }
        }
    }
}

#[cfg(test)]
mod tests;
