//! A small deterministic [`Chain`] for this crate's tests: top_k, temperature and a seeded draw
//! (xorshift). Its draw depends only on the candidates' values, never on their order, so tests
//! can compare two paths that should hand it the same candidate set.

use super::Chain;
use crate::{Token, TokenData};
use runner_protocol::Sampling;

pub struct TestChain {
    top_k: usize,
    temp: f32,
    state: u64,
}

impl Chain for TestChain {
    fn build(p: &Sampling) -> Self {
        TestChain {
            top_k: p.top_k.max(0) as usize,
            temp: p.temperature,
            state: (p.seed as u64) ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    fn select(&mut self, cands: &mut [TokenData]) -> Option<Token> {
        let mut c: Vec<TokenData> = cands.to_vec();
        c.sort_by(|a, b| b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id)));
        if self.top_k > 0 {
            c.truncate(self.top_k);
        }
        let max = c.first()?.logit;
        let w: Vec<f64> = c
            .iter()
            .map(|d| (((d.logit - max) / self.temp) as f64).exp())
            .collect();
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        let mut u = (self.state >> 11) as f64 / (1u64 << 53) as f64 * w.iter().sum::<f64>();
        for (d, w) in c.iter().zip(&w) {
            if u < *w {
                return Some(d.id);
            }
            u -= w;
        }
        c.last().map(|d| d.id)
    }

    fn accept(&mut self, _: Token) {}
}
