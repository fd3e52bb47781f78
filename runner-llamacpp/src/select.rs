//! Vocabulary-sized scans for the sampler, written so that no step builds or sorts an array of
//! the whole vocabulary: argmax, the k largest logits, and log-softmax with its top entries.
//!
//! Every function here skips non-finite logits (a mask forbids a token with `-inf`), and every
//! tie between equal logits goes to the lower token id, so results never depend on scan order.

use crate::ffi::{Token, TokenData};

/// Index of the largest finite logit; ties go to the lowest id.
pub fn argmax(logits: &[f32]) -> Option<Token> {
    let mut best = f32::NEG_INFINITY;
    let mut at = None;
    for (i, &l) in logits.iter().enumerate() {
        // `>` keeps the first of equal values; -inf and NaN never pass (NaN compares false).
        if l > best && l.is_finite() {
            best = l;
            at = Some(i);
        }
    }
    at.map(|i| i as Token)
}

/// Orders candidates best first: higher logit, then lower id.
fn better(a: &TokenData, b: &TokenData) -> std::cmp::Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// The `k` largest finite logits, best first (ties: lower id first), into `out` (cleared).
///
/// One pass over the vocabulary with a buffer of at most 2k entries: an entry is kept only when
/// it beats the current k-th best, and the buffer is cut back to k when it fills, so the cost is
/// O(V) compares plus O(k log k) per cut.
pub fn top_k(logits: &[f32], k: usize, out: &mut Vec<TokenData>) {
    out.clear();
    if k == 0 {
        return;
    }
    let cap = 2 * k.max(16);
    // The k-th best logit once k entries have been seen; entries not above it cannot enter
    // (an equal logit has a higher id than the one it ties, so it loses the tie).
    let mut floor = f32::NEG_INFINITY;
    for (i, &l) in logits.iter().enumerate() {
        if l > floor && l.is_finite() {
            out.push(TokenData {
                id: i as Token,
                logit: l,
                p: 0.0,
            });
            if out.len() == cap {
                cut(out, k);
                floor = out[k - 1].logit;
            }
        }
    }
    cut(out, k);
}

/// Keep the best `k` of `v`, sorted best first.
fn cut(v: &mut Vec<TokenData>, k: usize) {
    if v.len() > k {
        v.select_nth_unstable_by(k - 1, better);
        v.truncate(k);
    }
    v.sort_unstable_by(better);
}

/// Log-softmax over the finite logits: the log-probability of `token` and the `n` most likely
/// tokens with theirs, best first. `scratch` is reused between calls.
pub fn log_probs(
    logits: &[f32],
    token: Token,
    n: usize,
    scratch: &mut Vec<TokenData>,
) -> (Option<f32>, Vec<(Token, f32)>) {
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
    top_k(logits, n, scratch);
    (lp, scratch.iter().map(|c| (c.id, c.logit - lse)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reference: sort every finite entry (the array this module exists to avoid).
    fn sorted_ref(logits: &[f32], k: usize) -> Vec<(Token, f32)> {
        let mut v: Vec<(Token, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, l)| l.is_finite())
            .map(|(i, &l)| (i as Token, l))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(k);
        v
    }

    /// Deterministic pseudo-random logits with many exact ties (values on a coarse grid).
    fn logits(n: usize, seed: u64, grid: f32) -> Vec<f32> {
        let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let u = (x >> 40) as f32 / (1u64 << 24) as f32;
                (u * 20.0 / grid).round() * grid - 10.0
            })
            .collect()
    }

    #[test]
    fn argmax_skips_masked_and_prefers_the_lowest_id_on_ties() {
        let cases: &[(&[f32], Option<Token>)] = &[
            (&[], None),
            (&[f32::NEG_INFINITY, f32::NEG_INFINITY], None),
            (&[0.0, 5.0, 4.0], Some(1)),
            (&[3.0, 5.0, 5.0], Some(1)),
            (&[f32::NEG_INFINITY, -7.0], Some(1)),
            (&[f32::NAN, -1.0, f32::INFINITY], Some(1)),
        ];
        for (l, want) in cases {
            assert_eq!(argmax(l), *want, "{l:?}");
        }
    }

    #[test]
    fn top_k_matches_a_full_sort_including_ties_and_masks() {
        let mut out = Vec::new();
        for (n, grid) in [(10, 0.001), (1000, 1.0), (5000, 0.5), (70_000, 0.01)] {
            for seed in 0..4 {
                let mut l = logits(n, seed, grid);
                // Mask a stretch, as a grammar would.
                for x in l.iter_mut().skip(n / 3).take(n / 4) {
                    *x = f32::NEG_INFINITY;
                }
                for k in [1, 2, 40, 100, n, n + 5] {
                    top_k(&l, k, &mut out);
                    let got: Vec<(Token, f32)> = out.iter().map(|c| (c.id, c.logit)).collect();
                    assert_eq!(got, sorted_ref(&l, k), "n {n} seed {seed} k {k}");
                }
            }
        }
        top_k(&[1.0, 2.0], 0, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn log_probs_are_a_log_softmax_with_sorted_top() {
        let l = [1.0f32, 3.0, f32::NEG_INFINITY, 2.0];
        let (lp, top) = log_probs(&l, 1, 2, &mut Vec::new());
        let z: f32 = [1.0f32, 3.0, 2.0].iter().map(|x| x.exp()).sum();
        assert!((lp.unwrap() - (3.0f32.exp() / z).ln()).abs() < 1e-5);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3]);
        assert!((top[1].1 - (2.0f32.exp() / z).ln()).abs() < 1e-5);
        assert_eq!(
            log_probs(&[f32::NEG_INFINITY], 0, 3, &mut Vec::new()),
            (None, vec![])
        );
    }
}
