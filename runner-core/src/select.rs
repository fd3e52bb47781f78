//! Vocabulary-sized scans for the sampler, written so that no step builds or sorts an array of
//! the whole vocabulary: argmax, the k largest logits, and log-softmax with its top entries.
//!
//! Every function here skips non-finite logits (a mask forbids a token with `-inf`), and every
//! tie between equal logits goes to the lower token id, so results never depend on scan order.

use crate::{Token, TokenData};

/// Lanes of the max scans: wide enough for the compiler to keep them in vector registers.
const LANES: usize = 16;

/// Block `top_k` rejects with one max scan: long enough to amortize folding the lanes, short
/// enough that few blocks (about 256 k / V of them) need the scalar look.
const BLOCK: usize = 256;

/// Largest value of `xs`, ignoring NaN; -inf when empty. Lane-wise, so it vectorizes.
fn max_of(xs: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (m, &x) in lanes.iter_mut().zip(c) {
            // `x > m` is false for NaN, so NaN never enters.
            *m = if x > *m { x } else { *m };
        }
    }
    lanes
        .iter()
        .chain(rest)
        .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m })
}

/// Index of the largest finite logit; ties go to the lowest id. The row is read once (each
/// block's max, a vector scan); only the first block holding the max is looked into again,
/// which matters when a GPU has just written the row and it comes from memory.
pub fn argmax(logits: &[f32]) -> Option<Token> {
    let (mut best, mut at) = (f32::NEG_INFINITY, 0);
    for (ci, block) in logits.chunks(BLOCK).enumerate() {
        let m = max_of(block);
        if m > best {
            (best, at) = (m, ci);
        }
    }
    if best == f32::INFINITY {
        // +inf is not a usable logit: the slow scan below skips it.
        return argmax_finite(logits);
    }
    if best == f32::NEG_INFINITY {
        return None;
    }
    let start = at * BLOCK;
    logits[start..]
        .iter()
        .position(|&l| l == best)
        .map(|i| (start + i) as Token)
}

fn argmax_finite(logits: &[f32]) -> Option<Token> {
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
/// Two passes over the vocabulary, no array of it: the first takes each block's max (a vector
/// scan). The k-th largest block max is reached by k distinct entries, so it bounds the k-th
/// largest logit from below, and only blocks whose max reaches it can hold a winner: the second
/// pass looks into those (about k blocks) alone. With +inf in the row (no finite entry behind
/// it) or fewer than k blocks, one pass looks into every block that beats the running k-th best.
pub fn top_k(logits: &[f32], k: usize, out: &mut Vec<TokenData>) {
    out.clear();
    if k == 0 {
        return;
    }
    if logits.len().div_ceil(BLOCK) > k {
        let maxes: Vec<f32> = logits.chunks(BLOCK).map(max_of).collect();
        if !maxes.contains(&f32::INFINITY) {
            let mut order = maxes.clone();
            let (_, &mut bound, _) = order.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            return scan(logits, k, out, Some(&maxes), bound);
        }
    }
    scan(logits, k, out, None, f32::NEG_INFINITY)
}

/// The `top_k` scan over entries `>= bound`, with a buffer of at most 2k entries: an entry is
/// kept only when it beats the current k-th best, and the buffer is cut back to k when it fills.
/// `maxes`: the blocks' maxima when known.
fn scan(logits: &[f32], k: usize, out: &mut Vec<TokenData>, maxes: Option<&[f32]>, bound: f32) {
    let cap = 2 * k.max(16);
    // The k-th best logit once k entries have been seen; entries not above it cannot enter
    // (an equal logit has a higher id than the one it ties, so it loses the tie).
    let mut floor = f32::NEG_INFINITY;
    for (ci, block) in logits.chunks(BLOCK).enumerate() {
        let top = maxes.map_or_else(|| max_of(block), |m| m[ci]);
        // Most blocks hold nothing above the floor once k entries are in.
        if top < bound || top <= floor {
            continue;
        }
        for (j, &l) in block.iter().enumerate() {
            if l > floor && l >= bound && l.is_finite() {
                out.push(TokenData {
                    id: (ci * BLOCK + j) as Token,
                    logit: l,
                    p: 0.0,
                });
                if out.len() == cap {
                    cut(out, k);
                    floor = out[k - 1].logit;
                }
            }
        }
    }
    cut(out, k);
}

/// Keep the best `k` of `v`, sorted best first (`k == 0`: keep all).
pub fn cut(v: &mut Vec<TokenData>, k: usize) {
    if k > 0 && v.len() > k {
        v.select_nth_unstable_by(k - 1, better);
        v.truncate(k);
    }
    v.sort_unstable_by(better);
}

/// `top_k` over the entries a mask allows (`bits`: token `t` allowed when bit `t % 32` of word
/// `t / 32` is set; ids past the words are forbidden): the same result as `top_k` over a row
/// where every other entry is -inf, without writing that row.
///
/// Two passes, as `top_k`'s: the first takes each block's largest *allowed* finite logit (a
/// vector scan with the mask's word as a lane select). k blocks that each hold an allowed entry
/// reaching the k-th largest of those maxima bound the k-th best allowed logit from below, so the
/// second pass looks into the blocks whose allowed maximum reaches it (about k of them), in id
/// order, comparing 32 entries at a time with the floor and ANDing the result with the word.
/// Visiting every block by its unmasked maximum instead (the earlier way) looked into nearly all
/// of them whenever the row's top was spread out and the mask allowed a fraction of it.
pub fn top_k_allowed(logits: &[f32], k: usize, bits: &[u32], out: &mut Vec<TokenData>) {
    out.clear();
    if k == 0 {
        return;
    }
    const { assert!(BLOCK.is_multiple_of(32)) };
    let maxes: Vec<f32> = logits
        .chunks(BLOCK)
        .enumerate()
        .map(|(b, block)| allowed_max(block, bits, b * BLOCK / 32))
        .collect();
    let holding = maxes.iter().filter(|&&m| m > f32::NEG_INFINITY).count();
    // An allowed +inf is no usable logit and says nothing of the finite entries: no bound.
    let bound = if holding >= k && !maxes.contains(&f32::INFINITY) {
        let mut order = maxes.clone();
        let (_, &mut b, _) = order.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
        b
    } else {
        f32::NEG_INFINITY
    };
    // A lower bound on the k-th best allowed logit: `bound`, then the k-th best kept once 2k
    // are in. An entry equal to it still enters (a lower id wins the tie); `cut` orders them.
    let mut floor = bound;
    let cap = 2 * k.max(16);
    for (b, &top) in maxes.iter().enumerate() {
        if top < floor || top == f32::NEG_INFINITY {
            continue;
        }
        let start = b * BLOCK;
        let block = &logits[start..(start + BLOCK).min(logits.len())];
        for (w, chunk) in block.chunks(32).enumerate() {
            let word = start / 32 + w;
            let mut m = bits.get(word).copied().unwrap_or(0);
            if m == 0 {
                continue;
            }
            let mut above = 0u32;
            for (i, &l) in chunk.iter().enumerate() {
                above |= u32::from(l >= floor) << i;
            }
            m &= above;
            while m != 0 {
                let i = m.trailing_zeros() as usize;
                m &= m - 1;
                let l = chunk[i];
                if l.is_finite() {
                    out.push(TokenData {
                        id: (word * 32 + i) as Token,
                        logit: l,
                        p: 0.0,
                    });
                }
            }
        }
        // Cut back to k only when 2k are in (as `scan`): a floor that lags is still a bound.
        if out.len() >= cap {
            out.select_nth_unstable_by(k - 1, better);
            out.truncate(k);
            floor = out[k - 1].logit;
        }
    }
    cut(out, k);
}

/// For each byte of a mask word, what its 8 tokens' logits get added: 0 where the bit is set
/// (allowed), -inf where not.
static BYTE_BIAS: [[f32; 8]; 256] = {
    let mut t = [[0.0f32; 8]; 256];
    let mut b = 0;
    while b < 256 {
        let mut i = 0;
        while i < 8 {
            if b & (1 << i) == 0 {
                t[b][i] = f32::NEG_INFINITY;
            }
            i += 1;
        }
        b += 1;
    }
    t
};

/// The largest logit of `block` that `bits` allows (-inf when none; +inf when an allowed entry
/// is +inf), the block starting at word `first_word`. Each entry plus its bit's bias (0 or -inf,
/// [`BYTE_BIAS`]) into lane-wise maxima, so it vectorizes; NaN never enters (as in `max_of`).
fn allowed_max(block: &[f32], bits: &[u32], first_word: usize) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 32];
    let words = block.chunks_exact(32);
    let rest = words.remainder();
    for (w, chunk) in words.enumerate() {
        let word = bits.get(first_word + w).copied().unwrap_or(0);
        if word == 0 {
            continue;
        }
        for (q, (xs, ms)) in chunk
            .chunks_exact(8)
            .zip(lanes.chunks_exact_mut(8))
            .enumerate()
        {
            let bias = &BYTE_BIAS[(word >> (8 * q)) as usize & 0xFF];
            for ((m, &x), &b) in ms.iter_mut().zip(xs).zip(bias) {
                let v = x + b;
                *m = if v > *m { v } else { *m };
            }
        }
    }
    let mut best = max_of(&lanes);
    let word = bits
        .get(first_word + block.len() / 32)
        .copied()
        .unwrap_or(0);
    for (i, &x) in rest.iter().enumerate() {
        if word & (1 << i) != 0 && x > best {
            best = x;
        }
    }
    best
}

/// `top_k` restricted to `ids` (ascending): the same result as `top_k` over a row where every
/// other entry is -inf, reading only those entries. `k == 0` keeps every finite one, best first.
pub fn top_k_of(logits: &[f32], ids: &[Token], k: usize, out: &mut Vec<TokenData>) {
    out.clear();
    out.extend(ids.iter().filter_map(|&id| {
        let l = *logits.get(id as usize)?;
        l.is_finite().then_some(TokenData {
            id,
            logit: l,
            p: 0.0,
        })
    }));
    cut(out, if k == 0 { out.len().max(1) } else { k });
}

/// The best of `c` (highest logit, lowest id on ties; finite logits only): `argmax` over a
/// candidate list.
pub fn best(c: &[TokenData]) -> Option<Token> {
    c.iter()
        .filter(|t| t.logit.is_finite())
        .min_by(|a, b| better(a, b))
        .map(|t| t.id)
}

/// `argmax` restricted to `ids` (ascending): ties go to the lowest id, non-finite skipped.
pub fn argmax_of(logits: &[f32], ids: &[Token]) -> Option<Token> {
    let mut best = f32::NEG_INFINITY;
    let mut at = None;
    for &id in ids {
        if let Some(&l) = logits.get(id as usize) {
            if l > best && l.is_finite() {
                best = l;
                at = Some(id);
            }
        }
    }
    at
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
            (&[f32::INFINITY, f32::NAN], None),
        ];
        for (l, want) in cases {
            assert_eq!(argmax(l), *want, "{l:?}");
        }
    }

    #[test]
    fn argmax_agrees_with_a_scalar_scan_on_long_rows() {
        for seed in 0..8u64 {
            let n = 1000 + seed as usize * 37;
            let mut l = logits(n, seed, 0.5);
            if seed % 2 == 0 {
                l[17] = f32::NAN;
                l[n / 2] = f32::INFINITY;
            }
            if seed % 3 == 0 {
                l.iter_mut()
                    .take(n - 3)
                    .for_each(|x| *x = f32::NEG_INFINITY);
            }
            assert_eq!(argmax(&l), argmax_finite(&l), "seed {seed}");
        }
    }

    #[test]
    fn top_k_matches_a_full_sort_including_ties_and_masks() {
        let mut out = Vec::new();
        for (n, grid) in [
            (10, 0.001),
            (1000, 1.0),
            (5000, 0.5),
            (70_000, 0.01),
            (130_000, 1e-4),
        ] {
            for seed in 0..4 {
                let mut l = logits(n, seed, grid);
                // Mask a stretch, as a grammar would.
                for x in l.iter_mut().skip(n / 3).take(n / 4) {
                    *x = f32::NEG_INFINITY;
                }
                l[n / 2] = f32::NAN;
                if seed % 2 == 0 {
                    // +inf hides no finite entry: the one-pass fallback.
                    l[n - 1] = f32::INFINITY;
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
    fn top_k_allowed_is_top_k_of_the_masked_row() {
        let mut out = Vec::new();
        let mut want = Vec::new();
        for (n, grid) in [
            (10, 0.001),
            (1000, 1.0),
            (5000, 0.5),
            (130_000, 1e-4),
            (130_000, 0.5),
        ] {
            for seed in 0..4u64 {
                let mut l = logits(n, seed, grid);
                l[n / 2] = f32::NAN;
                if seed % 2 == 0 {
                    l[n - 1] = f32::INFINITY;
                }
                if seed == 3 {
                    for x in l.iter_mut().take(n / 2) {
                        *x = f32::NEG_INFINITY;
                    }
                }
                // Masks from dense to empty: every id, every 8th id (hashed), odd ids, one id,
                // none, and words that end before the row.
                let words = |f: &dyn Fn(usize) -> bool, len: usize| -> Vec<u32> {
                    (0..len)
                        .map(|w| {
                            (0..32)
                                .filter(|b| f(w * 32 + b))
                                .fold(0u32, |x, b| x | 1 << b)
                        })
                        .collect()
                };
                let full = n.div_ceil(32);
                let hash = |t: usize| (t as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 61 == 0;
                let masks: [(&str, Vec<u32>); 6] = [
                    ("all", words(&|_| true, full)),
                    ("hashed 1/8", words(&hash, full)),
                    ("odd", words(&|t| t % 2 == 1, full)),
                    ("one", words(&|t| t == n / 3, full)),
                    ("none", words(&|_| false, full)),
                    ("short", words(&|_| true, full / 2)),
                ];
                for (name, bits) in &masks {
                    let allowed =
                        |i: usize| bits.get(i / 32).is_some_and(|w| w & (1 << (i % 32)) != 0);
                    let masked: Vec<f32> = l
                        .iter()
                        .enumerate()
                        .map(|(i, &x)| if allowed(i) { x } else { f32::NEG_INFINITY })
                        .collect();
                    for k in [1, 2, 40, 100, n + 5] {
                        top_k_allowed(&l, k, bits, &mut out);
                        top_k(&masked, k, &mut want);
                        let got: Vec<(Token, f32)> = out.iter().map(|c| (c.id, c.logit)).collect();
                        let exp: Vec<(Token, f32)> = want.iter().map(|c| (c.id, c.logit)).collect();
                        assert_eq!(got, exp, "n {n} grid {grid} seed {seed} mask {name} k {k}");
                    }
                }
            }
        }
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
