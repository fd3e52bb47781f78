//! The sampler's behaviour: masks, penalties, seeds, restricted samples, log-probabilities.

use super::*;
type Sampler = super::Sampler<super::test_chain::TestChain>;

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
    assert_eq!(s.sample(&mut logits.clone(), false, 0).unwrap().token, 1);
    let mut s = Sampler::new(&params(0.0, 0), &[], 16, forbid(vec![1]));
    assert_eq!(s.sample(&mut logits.clone(), false, 0).unwrap().token, 2);
}

#[test]
fn stochastic_sampling_never_picks_a_masked_token() {
    // Token 0 dominates; with it masked, 200 seeded draws must avoid it.
    let logits = [10.0, 1.0, 1.0, 1.0];
    for seed in 0..200 {
        let mut s = Sampler::new(&params(1.5, seed), &[], 16, forbid(vec![0]));
        let c = s.sample(&mut logits.clone(), false, 0).unwrap();
        assert_ne!(c.token, 0, "seed {seed}");
    }
}

#[test]
fn same_seed_same_choices() {
    let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
    let draw = |seed| {
        let mut s = Sampler::new(&params(1.0, seed), &[], 16, Box::new(NoMask));
        (0..20)
            .map(|_| s.sample(&mut logits.clone(), false, 0).unwrap().token)
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
            .map(|_| s.sample(&mut logits.clone(), false, 0).unwrap().token)
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
    assert_eq!(s.sample(&mut logits.clone(), false, 0).unwrap().token, 2);
    // Frequency and presence penalties subtract.
    let mut logits = [0.0, 2.0, 1.0];
    let p = Sampling {
        frequency_penalty: 0.5,
        presence_penalty: 0.25,
        ..params(0.0, 0)
    };
    apply_penalties(&mut logits, &[(1, 2)].into_iter().collect(), &p);
    assert_eq!(logits, [0.0, 2.0 - 1.0 - 0.25, 1.0]);
}

#[test]
fn the_penalty_window_counts_what_it_holds() {
    let p = Sampling {
        repeat_last_n: 3,
        repeat_penalty: 1.1,
        ..params(0.0, 0)
    };
    let mut s = Sampler::new(&p, &[5, 5, 6, 7], 16, Box::new(NoMask));
    let mut want: Vec<Token> = vec![5, 6, 7];
    for next in [1usize, 1, 1, 5, 0, 2] {
        let mut logits = vec![0.0f32; 8];
        logits[next] = 9.0;
        let t = s.sample(&mut logits, false, 0).unwrap().token;
        assert_eq!(t, next as Token);
        want.push(t);
        want.remove(0);
        let mut recount: HashMap<Token, u32> = HashMap::new();
        for &w in &want {
            *recount.entry(w).or_default() += 1;
        }
        assert_eq!(s.history.iter().copied().collect::<Vec<_>>(), want);
        assert_eq!(s.counts, recount);
    }
}

/// The fast path (top-k selection, then the chain on k entries) must draw exactly what the
/// same chain draws from the whole vocabulary, seed for seed.
#[test]
fn top_k_selection_draws_what_the_full_chain_draws() {
    // Distinct logits (7919 permutes 0..3001, a prime): llama.cpp's top_k orders exact ties
    // arbitrarily, so only tie-free rows have one right answer.
    let n = 3000;
    let logits: Vec<f32> = (0..n)
        .map(|i| ((i * 7919 % 3001) as f32 / 300.0) - 5.0)
        .collect();
    for (top_k, top_p, min_p, typical_p) in [
        (40, 0.9, 0.0, 1.0),
        (5, 1.0, 0.05, 1.0),
        (100, 0.95, 0.05, 0.8),
    ] {
        let p = Sampling {
            top_k,
            top_p,
            min_p,
            typical_p,
            ..params(0.9, 11)
        };
        let mut fast = Sampler::new(&p, &[], 16, Box::new(NoMask));
        let mut full = Sampler::new(&p, &[], 16, Box::new(NoMask));
        // Force the reference through the full candidate array.
        full.k = 0;
        for step in 0..50 {
            let a = fast.sample(&mut logits.clone(), false, 0).unwrap().token;
            let b = full.sample(&mut logits.clone(), false, 0).unwrap().token;
            assert_eq!(a, b, "top_k {top_k} step {step}");
        }
    }
}

/// Allows `ids` either by rewriting the row (dense) or by handing them over (sparse).
struct Allow(Vec<Token>, bool);
impl TokenMask for Allow {
    fn apply(&mut self, logits: &mut [f32]) {
        keep_only(logits, &self.0);
    }
    fn apply_sparse(&mut self, logits: &mut [f32]) -> Option<Vec<Token>> {
        if self.1 {
            return Some(self.0.clone());
        }
        self.apply(logits);
        None
    }
    fn commit(&mut self, _: Token) {}
}

#[test]
fn sparse_and_dense_masks_choose_alike() {
    let row: Vec<f32> = (0..500).map(|i| ((i * 37 % 101) as f32) / 10.0).collect();
    let ids: Vec<Token> = (0..500).filter(|i| i % 7 == 3).collect();
    for (temperature, top_k) in [(0.0, 40), (0.8, 40), (0.8, 0), (1.5, 5)] {
        for seed in 0..20 {
            let run = |sparse: bool| {
                let p = Sampling {
                    top_k,
                    ..params(temperature, seed)
                };
                let mut s = Sampler::new(&p, &[], 16, Box::new(Allow(ids.clone(), sparse)));
                (0..5)
                    .map(|_| s.sample(&mut row.clone(), true, 3).unwrap())
                    .collect::<Vec<_>>()
            };
            let (dense, sparse) = (run(false), run(true));
            assert_eq!(dense, sparse, "t={temperature} k={top_k} seed={seed}");
            assert!(sparse.iter().all(|c| ids.contains(&c.token)));
        }
    }
    let mut row = vec![1.0f32; 10];
    keep_only(&mut row, &[2, 5, 9, 40]);
    let kept: Vec<usize> = (0..10).filter(|&i| row[i].is_finite()).collect();
    assert_eq!(kept, vec![2, 5, 9]);
}

/// A restricted sample and `take_forced` choose the same token and leave the chain's random
/// state alike, so what follows is the same draw either way (grammar fast-forward on/off).
#[test]
fn a_restricted_sample_is_no_draw() {
    let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
    let run = |how: u8| {
        let mut s = Sampler::new(&params(0.9, 7), &[], 16, forbid(vec![3]));
        let first = match how {
            0 => {
                s.restrict_next(11);
                s.sample(&mut logits.clone(), false, 0).unwrap().token
            }
            1 => s.take_forced(11).token,
            // No restriction: a real draw, which moves the random state.
            _ => s.sample(&mut logits.clone(), false, 0).unwrap().token,
        };
        let rest: Vec<Token> = (0..20)
            .map(|_| s.sample(&mut logits.clone(), false, 0).unwrap().token)
            .collect();
        (first, rest)
    };
    let (sampled, taken, drawn) = (run(0), run(1), run(2));
    assert_eq!(sampled, taken);
    assert_eq!(sampled.0, 11);
    assert_ne!(
        sampled.1, drawn.1,
        "a draw moves the state (the check can fail)"
    );
    // A restriction the mask forbids falls back to the mask alone.
    let mut s = Sampler::new(&params(0.0, 0), &[], 16, forbid(vec![6]));
    s.restrict_next(6);
    assert_eq!(s.sample(&mut logits.clone(), false, 0).unwrap().token, 13);
}

#[test]
fn logprobs_come_from_the_masked_row() {
    let logits = [1.0f32, 3.0, 2.0];
    let mut s = Sampler::new(&params(0.0, 0), &[], 16, forbid(vec![1]));
    let c = s.sample(&mut logits.clone(), true, 2).unwrap();
    assert_eq!(c.token, 2);
    let z: f32 = [1.0f32, 2.0].iter().map(|l| l.exp()).sum();
    assert!((c.logprob.unwrap() - (2.0f32.exp() / z).ln()).abs() < 1e-5);
    assert_eq!(c.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![2, 0]);
}

/// Allows the tokens whose bit is set; with `dense` it offers its bits so the sampler checks
/// its choice instead of writing the mask (`Sampler::sample_checked`).
struct Bits {
    words: Vec<u32>,
    dense: bool,
    seen: Arc<Mutex<Vec<Token>>>,
}
impl TokenMask for Bits {
    fn apply(&mut self, logits: &mut [f32]) {
        for (t, l) in logits.iter_mut().enumerate() {
            if self.words[t / 32] & (1 << (t % 32)) == 0 {
                *l = f32::NEG_INFINITY;
            }
        }
    }
    fn dense_bits(&mut self) -> Option<&[u32]> {
        self.dense.then_some(self.words.as_slice())
    }
    fn commit(&mut self, t: Token) {
        self.seen.lock().unwrap().push(t);
    }
}

#[test]
fn checking_a_choice_against_a_dense_mask_chooses_what_writing_the_mask_chooses() {
    // Rows where the best tokens are sometimes forbidden (the check fails and the mask is
    // written) and sometimes allowed, greedy and top-k, with and without penalties; every
    // draw of the checked path must equal the written-mask path's, seed for seed.
    let n: usize = 600;
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let rows: Vec<Vec<f32>> = (0..40)
        .map(|_| (0..n).map(|_| (next() % 1000) as f32 / 97.0).collect())
        .collect();
    // About one token in four forbidden, and a forbidden block at the top ids; or one token in
    // five allowed (a JSON string over a byte-pair vocabulary).
    let quarter: Vec<u32> = (0..n.div_ceil(32))
        .map(|i| {
            if i >= 16 {
                0
            } else {
                !0x1111_1111u32.rotate_left(i as u32)
            }
        })
        .collect();
    let fifth: Vec<u32> = (0..n.div_ceil(32))
        .map(|i| {
            (0..32)
                .filter(|b| (i * 32 + b) % 5 == 2)
                .fold(0u32, |w, b| w | 1 << b)
        })
        .collect();
    let cases = [
        (0.0, 0, 1.0),
        (0.0, 0, 1.3),
        (0.8, 5, 1.0),
        (0.8, 40, 1.2),
        (1.5, 200, 1.0),
        // top_k 0 is never checked: the whole row goes to the chain.
        (0.9, 0, 1.0),
    ];
    for ((temperature, top_k, repeat_penalty), words) in
        cases.iter().flat_map(|c| [(*c, &quarter), (*c, &fifth)])
    {
        let p = Sampling {
            temperature,
            top_k,
            repeat_penalty,
            repeat_last_n: 8,
            seed: 11,
            ..Sampling::default()
        };
        let run = |dense: bool| {
            let seen = Arc::new(Mutex::new(Vec::new()));
            let mask = Bits {
                words: words.clone(),
                dense,
                seen: seen.clone(),
            };
            let mut s = Sampler::new(&p, &[3, 9, 27], n, Box::new(mask));
            let got: Vec<Token> = rows
                .iter()
                .map(|r| s.sample(&mut r.clone(), false, 0).expect("a token").token)
                .collect();
            assert_eq!(*seen.lock().unwrap(), got, "each choice committed once");
            got
        };
        let (written, checked) = (run(false), run(true));
        assert_eq!(
            written,
            checked,
            "t {temperature} k {top_k} rp {repeat_penalty} words {:?}",
            &words[..2]
        );
        assert!(
            checked
                .iter()
                .all(|&t| words[t as usize / 32] & (1 << (t % 32)) != 0),
            "a forbidden token was chosen"
        );
    }
}
