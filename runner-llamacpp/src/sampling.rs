//! llama.cpp's sampler chain as runner-core's [`Chain`]: the sampling policy (mask, penalties,
//! greedy, top-k selection, log-probabilities) is runner-core's; the stochastic samplers are
//! llama.cpp's, so seeded draws match llama.cpp's (and Ollama's) for the same candidates.

use crate::ffi::{SamplerChain, Token, TokenData};
use runner_protocol::Sampling;

pub use runner_core::sampling::{needs_row, Chain, Choice};

/// The sampler every slot uses.
pub type Sampler = runner_core::sampling::Sampler<SamplerChain>;

impl Chain for SamplerChain {
    fn build(p: &Sampling) -> Self {
        let mut c = SamplerChain::new();
        if p.top_k > 0 {
            // Idempotent on the k candidates the sampler hands over; kept so the chain alone
            // means what Ollama's does.
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
    }

    fn select(&mut self, cands: &mut [TokenData]) -> Option<Token> {
        SamplerChain::select(self, cands)
    }

    fn accept(&mut self, t: Token) {
        SamplerChain::accept(self, t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runner_core::sampling::{NoMask, TokenMask};

    struct Forbid(Token);
    impl TokenMask for Forbid {
        fn apply(&mut self, logits: &mut [f32]) {
            logits[self.0 as usize] = f32::NEG_INFINITY;
        }
        fn commit(&mut self, t: Token) {
            assert_ne!(t, self.0, "a forbidden token was chosen");
        }
    }

    fn params(temperature: f32, top_k: i32, seed: i64) -> Sampling {
        Sampling {
            temperature,
            top_k,
            seed,
            repeat_penalty: 1.0,
            ..Sampling::default()
        }
    }

    fn draws(p: &Sampling, mask: Box<dyn TokenMask>) -> Vec<Token> {
        let mut s = Sampler::new(p, &[], 16, mask);
        (0..40)
            .map(|_| {
                let mut row = vec![1.0, 1.2, 0.9, 1.1, 0.0];
                s.sample(&mut row, false, 0).unwrap().token
            })
            .collect()
    }

    #[test]
    fn the_llama_chain_is_seeded_spreads_its_draws_and_honours_the_mask() {
        for top_k in [0, 3] {
            let a = draws(&params(1.0, top_k, 42), Box::new(NoMask));
            assert_eq!(
                a,
                draws(&params(1.0, top_k, 42), Box::new(NoMask)),
                "same seed"
            );
            assert_ne!(
                a,
                draws(&params(1.0, top_k, 43), Box::new(NoMask)),
                "other seed"
            );
            let distinct: std::collections::BTreeSet<_> = a.iter().collect();
            assert!(
                distinct.len() > 1,
                "temperature 1 draws more than one token: {a:?}"
            );
            if top_k == 3 {
                assert!(a.iter().all(|t| [0, 1, 3].contains(t)), "top_k 3: {a:?}");
            }
            draws(&params(1.5, top_k, 7), Box::new(Forbid(1)));
        }
    }
}
