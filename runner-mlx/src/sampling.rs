//! The stochastic samplers in pure Rust, as runner-core's [`Chain`] over the logits the shim
//! returns: top_k, typical, top_p, min_p, temperature, then a seeded draw (Ollama's order, with
//! llama.cpp's meaning of each step: typical, top_p and min_p judge the untempered
//! distribution). The policy around it (mask, penalties, greedy, logprobs) is runner-core's.
//!
//! Invariants: every step keeps at least one candidate; the draw depends only on the seed and
//! the surviving candidates in logit order, so a seeded request repeats exactly.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runner_core::sampling::Chain;
use runner_core::{Token, TokenData};
use runner_protocol::Sampling;

/// The sampler every slot uses.
pub type Sampler = runner_core::sampling::Sampler<RustChain>;

pub struct RustChain {
    p: Sampling,
    rng: StdRng,
}

/// Probabilities of `c` (sorted by logit, descending) into `p`.
fn softmax(c: &mut [TokenData]) {
    let max = c.first().map_or(0.0, |d| d.logit);
    let mut sum = 0.0f64;
    for d in c.iter_mut() {
        d.p = (d.logit - max).exp();
        sum += d.p as f64;
    }
    for d in c.iter_mut() {
        d.p = (d.p as f64 / sum) as f32;
    }
}

/// How many of the first candidates to keep so that their probability mass reaches `mass`
/// (at least one).
fn mass_len(c: &[TokenData], mass: f32) -> usize {
    let mut cum = 0.0f32;
    for (i, d) in c.iter().enumerate() {
        cum += d.p;
        if cum >= mass {
            return i + 1;
        }
    }
    c.len().max(1)
}

impl RustChain {
    /// The candidates the chain draws from, best first (`c` is rewritten and sorted).
    fn survivors<'a>(&self, c: &'a mut [TokenData]) -> &'a mut [TokenData] {
        c.sort_by(|a, b| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id)));
        let p = &self.p;
        let mut n = c.len();
        if p.top_k > 0 {
            n = n.min(p.top_k as usize);
        }
        if p.typical_p > 0.0 && p.typical_p < 1.0 && n > 1 {
            softmax(&mut c[..n]);
            let entropy: f32 = c[..n]
                .iter()
                .filter(|d| d.p > 0.0)
                .map(|d| -d.p * d.p.ln())
                .sum();
            // Most typical first: |−log p − H| ascending; keep the mass typical_p of those.
            let dev = |d: &TokenData| (-d.p.ln() - entropy).abs();
            c[..n].sort_by(|a, b| dev(a).total_cmp(&dev(b)).then(a.id.cmp(&b.id)));
            n = mass_len(&c[..n], p.typical_p);
            c[..n].sort_by(|a, b| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id)));
        }
        if p.top_p > 0.0 && p.top_p < 1.0 && n > 1 {
            softmax(&mut c[..n]);
            n = mass_len(&c[..n], p.top_p);
        }
        if p.min_p > 0.0 && n > 1 {
            // p_i ≥ min_p · p_max  ⇔  logit_i ≥ logit_max + ln(min_p).
            let floor = c[0].logit + p.min_p.ln();
            n = c[..n]
                .iter()
                .take_while(|d| d.logit >= floor)
                .count()
                .max(1);
        }
        let c = &mut c[..n];
        for d in c.iter_mut() {
            d.logit /= p.temperature;
        }
        softmax(c);
        c
    }
}

impl Chain for RustChain {
    fn build(p: &Sampling) -> Self {
        let rng = match p.seed {
            s if s < 0 => StdRng::from_entropy(),
            s => StdRng::seed_from_u64(s as u64),
        };
        RustChain { p: p.clone(), rng }
    }

    fn select(&mut self, cands: &mut [TokenData]) -> Option<Token> {
        if cands.is_empty() {
            return None;
        }
        let u: f32 = self.rng.gen();
        let c = self.survivors(cands);
        let mut left = u;
        for d in c.iter() {
            if left < d.p {
                return Some(d.id);
            }
            left -= d.p;
        }
        c.last().map(|d| d.id)
    }

    fn accept(&mut self, _: Token) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_core::sampling::NoMask;

    fn params(f: impl FnOnce(&mut Sampling)) -> Sampling {
        let mut p = Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 42,
            ..Sampling::default()
        };
        f(&mut p);
        p
    }

    fn cands(logits: &[f32]) -> Vec<TokenData> {
        logits
            .iter()
            .enumerate()
            .map(|(i, &logit)| TokenData {
                id: i as Token,
                logit,
                p: 0.0,
            })
            .collect()
    }

    fn kept(p: &Sampling, logits: &[f32]) -> Vec<Token> {
        let chain = RustChain::build(p);
        let mut c = cands(logits);
        let mut ids: Vec<Token> = chain.survivors(&mut c).iter().map(|d| d.id).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn each_sampler_keeps_what_its_rule_says() {
        // Probabilities of these logits: ≈ 0.64, 0.24, 0.09, 0.03.
        let l = [3.0, 2.0, 1.0, 0.0];
        let cases: Vec<(Sampling, Vec<Token>)> = vec![
            (params(|_| {}), vec![0, 1, 2, 3]),
            (params(|p| p.top_k = 2), vec![0, 1]),
            (params(|p| p.top_p = 0.5), vec![0]),
            (params(|p| p.top_p = 0.8), vec![0, 1]),
            (params(|p| p.top_p = 0.95), vec![0, 1, 2]),
            (params(|p| p.min_p = 0.3), vec![0, 1]),
            (params(|p| p.min_p = 0.1), vec![0, 1, 2]),
            (params(|p| p.min_p = 0.9), vec![0]),
            // Typical: entropy ≈ 0.95 nats; |−ln p − H| ≈ 0.51, 0.49, 1.49, 2.49: token 1 is
            // the most typical, then 0.
            (params(|p| p.typical_p = 0.2), vec![1]),
            (params(|p| p.typical_p = 0.5), vec![0, 1]),
            (params(|p| p.typical_p = 0.9), vec![0, 1, 2]),
        ];
        for (p, want) in cases {
            assert_eq!(kept(&p, &l), want, "{p:?}");
        }
    }

    #[test]
    fn draws_are_seeded_follow_the_temperature_and_honour_top_k() {
        let draw = |p: &Sampling| -> Vec<Token> {
            let mut s = Sampler::new(p, &[], 16, Box::new(NoMask));
            (0..200)
                .map(|_| {
                    let mut row = vec![1.0, 1.2, 0.9, 1.1, 0.0];
                    s.sample(&mut row, false, 0).unwrap().token
                })
                .collect()
        };
        let a = draw(&params(|_| {}));
        assert_eq!(a, draw(&params(|_| {})), "same seed, same draws");
        assert_ne!(a, draw(&params(|p| p.seed = 7)), "another seed");
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(distinct.len(), 5, "temperature 1 reaches every token");
        let cold = draw(&params(|p| p.temperature = 0.01));
        assert!(cold.iter().all(|&t| t == 1), "a cold draw is greedy");
        let k2 = draw(&params(|p| p.top_k = 2));
        assert!(k2.iter().all(|t| [1, 3].contains(t)), "{k2:?}");
        let random = draw(&params(|p| p.seed = -1));
        assert_ne!(random, draw(&params(|p| p.seed = -1)), "a random seed");
    }
}
