//! How long an n-gram draft is worth making (`super::ngram` drafts it, each engine verifies):
//! pure policy from two measurements. A drafted step evaluates more tokens, which is nearly free
//! on a GPU (one 8B step reads all weights for 1 token or 17) but not on a CPU, where a step's
//! time grows with its tokens (SmolLM2 on one thread: a 9-token step took ~5x a 1-token one, so
//! `--draft-ngram 8` made a copy task 0.90x as fast at 43 % acceptance). So:
//! - [`StepCost`] fits decode-step time against token count (`a + b·n`, exponentially weighted
//!   least squares over decode-only steps) and gives the relative cost of one more token;
//! - [`Pace`] keeps a slot's per-position acceptance estimate (a decayed success count);
//! - [`best_len`] picks the draft length that maximizes expected tokens per unit of step time;
//!   on a GPU ([`StepCost::shaped`]) only among lengths `2^j - 1`, so a slot's step holds `2^j`
//!   tokens: a CUDA graph is kept per token count, and a step of a count not seen just before
//!   runs kernel by kernel (H200, SmolLM2: 2.2-3.0 ms against 0.2-0.45 ms graphed), so drafts
//!   of every length from 1 to 16 kept the drafted steps ungraphed and the measured cost high.
//!
//! Invariant: drafting never changes output (verification does not depend on the length), so
//! this only moves speed. On a GPU a step shape's first uses are no sample of its cost:
//! ggml-cuda runs a new shape kernel by kernel, captures its CUDA graph on the second use and
//! replays it from the third (and starts over whenever the KV view grows past a multiple of 256
//! cells), so an n-gram request's first drafted steps of 2, 4, 8 and 16 tokens took ~10x a
//! graphed step and a fit that kept them priced draft tokens high for ~100 steps (H200, run Y:
//! the first of three copy rounds at 1300 t/s against 2092 and 1694).
//! [`StepCost::observe_step`] leaves out a shape's first [`WARM_USES`] uses when lengths are
//! shaped. While the cost is unknown (every step had one token count) slots draft their whole
//! continuation and half of it by turns, so the fit sees two counts within a
//! few steps (runner-mlx on CPU drafted a whole 200-token copy at full length at 0.57x before
//! this, since every step had the same count); the fit forgets, so a runner that stopped
//! drafting tries again after a few hundred steps.

/// Weight kept by older steps per new one: ~100 steps dominate the fit.
const COST_DECAY: f64 = 0.99;
/// Token-count variance under which the fit cannot separate `a` from `b` (e.g. every step had
/// the same count): the cost of a draft token is then unknown.
const MIN_SPREAD: f64 = 0.1;

/// Uses of a GPU step shape (token count, KV view) that run before its CUDA graph replays: the
/// first runs kernel by kernel, the second is captured (ggml-cuda's warm-up).
pub const WARM_USES: u32 = 2;
/// llama.cpp pads a step's KV view to a multiple of this many cells: another multiple is another
/// graph.
const KV_PAD: usize = 256;

/// Decode-step time as `a + b·n` for `n` tokens, fitted over decode-only steps.
#[derive(Debug, Default, Clone)]
pub struct StepCost {
    /// Decode-only steps observed: the engine's step clock.
    steps: u64,
    /// A cost given instead of measured ([`StepCost::fixed`]).
    fixed: Option<f64>,
    /// Draft lengths are `2^j - 1` ([`StepCost::shaped`]).
    shaped: bool,
    w: f64,
    sn: f64,
    st: f64,
    snn: f64,
    snt: f64,
    /// Uses so far of each shaped step's (tokens, KV view in [`KV_PAD`] units), up to
    /// [`WARM_USES`].
    seen: std::collections::HashMap<(usize, usize), u32>,
}

impl StepCost {
    /// A step cost that is not measured: one more draft token in each decoding slot always adds
    /// `rho` of a step (the runners' `--draft-cost` test hook, so that how much is drafted does
    /// not depend on how fast a loaded machine happens to run). The step clock still counts.
    pub fn fixed(rho: f64) -> StepCost {
        StepCost {
            fixed: Some(rho.max(0.0)),
            ..StepCost::default()
        }
    }

    /// Draft lengths of the form `2^j - 1` only (a GPU's per-shape CUDA graphs; see the
    /// module header).
    pub fn shaped(self, on: bool) -> StepCost {
        StepCost { shaped: on, ..self }
    }

    /// Whether draft lengths are `2^j - 1` only.
    pub fn is_shaped(&self) -> bool {
        self.shaped
    }

    /// One decode-only step of `n` tokens that took `ns`.
    pub fn observe(&mut self, n: usize, ns: u64) {
        self.steps += 1;
        let (n, t) = (n as f64, ns as f64);
        let d = COST_DECAY;
        self.w = self.w * d + 1.0;
        self.sn = self.sn * d + n;
        self.st = self.st * d + t;
        self.snn = self.snn * d + n * n;
        self.snt = self.snt * d + n * t;
    }

    /// A decode-only step of `n` tokens over a KV view of `kv_cells` (the longest sequence in
    /// it, after the step) that took `ns`: as [`StepCost::observe`], except that with shaped
    /// lengths (a GPU) a shape's first [`WARM_USES`] uses only count as steps (module header).
    pub fn observe_step(&mut self, n: usize, kv_cells: usize, ns: u64) {
        if self.shaped {
            let uses = self.seen.entry((n, kv_cells.div_ceil(KV_PAD))).or_default();
            if *uses < WARM_USES {
                *uses += 1;
                self.steps += 1;
                return;
            }
        }
        self.observe(n, ns);
    }

    /// Decode-only steps observed so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// `(a, b)` of the fit, or None while the token counts seen do not separate them.
    fn fit(&self) -> Option<(f64, f64)> {
        if self.w <= 0.0 {
            return None;
        }
        let (mn, mt) = (self.sn / self.w, self.st / self.w);
        let var = self.snn / self.w - mn * mn;
        if var < MIN_SPREAD {
            return None;
        }
        let b = ((self.snt / self.w - mn * mt) / var).max(0.0);
        Some((mt - b * mn, b))
    }

    /// What one more draft token in each of `slots` decoding slots adds to a step of theirs,
    /// relative to that step's time without drafts (`b·slots / t(slots)`): every slot drafts the
    /// step's common length, so a draft length L costs `slots·L` tokens. None while unknown.
    pub fn rho(&self, slots: usize) -> Option<f64> {
        if let Some(rho) = self.fixed {
            return Some(rho);
        }
        let (a, b) = self.fit()?;
        let s = slots.max(1) as f64;
        let base = a + b * s;
        Some(if base <= 0.0 { 0.0 } else { b * s / base })
    }
}

/// Decay of a slot's acceptance counts per verified draft: the last ~10 drafts decide.
const PACE_DECAY: f64 = 0.9;
/// Prior acceptance counts (p = 0.75): optimistic, so a new request drafts and is measured.
const PRIOR_HITS: f64 = 1.5;
const PRIOR_MISSES: f64 = 0.5;
/// A slot whose drafts do not pay drafts one token on every this many-th step (by the engine's
/// step clock, [`StepCost::steps`], so that the slots of a step probe together: a step keeps
/// its slots' shortest draft), so that text which starts repeating later is noticed.
const PROBE_EVERY: u64 = 16;

/// The largest length `2^j - 1` that is at most `l` (0 for 0).
pub fn shape_floor(l: usize) -> usize {
    if l == 0 {
        0
    } else {
        (1usize << (usize::BITS - 1 - (l + 1).leading_zeros())) - 1
    }
}

/// The draft length in `0..=k` (only `2^j - 1` when `shaped`) that maximizes expected tokens
/// per step time: a draft of L tokens yields `1 + p + … + p^L` tokens (each position accepted
/// with probability `p` once the ones before it were) for a step `1 + rho·L` times as long.
pub fn best_len(p: f64, rho: f64, k: usize, shaped: bool) -> usize {
    let (mut best, mut best_rate) = (0, 1.0);
    let (mut tokens, mut pi) = (1.0, 1.0);
    for l in 1..=k {
        pi *= p;
        tokens += pi;
        if shaped && shape_floor(l) != l {
            continue;
        }
        let rate = tokens / (1.0 + rho * l as f64);
        if rate > best_rate * (1.0 + 1e-9) {
            best = l;
            best_rate = rate;
        }
    }
    best
}

/// One slot's n-gram acceptance: positions accepted and drafts cut short, decayed.
#[derive(Debug, Clone)]
pub struct Pace {
    hits: f64,
    misses: f64,
    /// The last draft at unknown cost was the whole continuation (the next is half of it).
    whole: bool,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            hits: PRIOR_HITS,
            misses: PRIOR_MISSES,
            whole: false,
        }
    }
}

impl Pace {
    /// The per-position acceptance estimate.
    pub fn p(&self) -> f64 {
        self.hits / (self.hits + self.misses)
    }

    /// How many of at most `k` n-gram tokens to draft now, given the step cost `rho`
    /// ([`StepCost::rho`]; None = unknown: all `k` and half of them by turns), the step clock
    /// `step` ([`StepCost::steps`]) and whether lengths are `2^j - 1` only (`shaped`); called
    /// when the drafter has a continuation to offer.
    pub fn len(&mut self, k: usize, rho: Option<f64>, step: u64, shaped: bool) -> usize {
        let Some(rho) = rho else {
            self.whole = !self.whole;
            let l = if self.whole { k } else { k.div_ceil(2) };
            return if shaped { shape_floor(l) } else { l };
        };
        match best_len(self.p(), rho, k, shaped) {
            0 if step.is_multiple_of(PROBE_EVERY) => k.min(1),
            l => l,
        }
    }

    /// A verified draft: `drafted` tokens went in, the first `accepted` were kept.
    pub fn observe(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        self.hits = self.hits * PACE_DECAY + accepted as f64;
        self.misses = self.misses * PACE_DECAY + f64::from(accepted < drafted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_length_weighs_acceptance_against_the_cost_of_a_token() {
        let cases = [
            // (p, rho, k) → length
            // Free draft tokens: draft all k whenever any is accepted.
            ((0.9, 0.0, 8), 8),
            ((0.3, 0.0, 8), 8),
            ((0.0, 0.0, 8), 0),
            // A GPU-like step (17 tokens cost 10 % more): long drafts unless acceptance is poor.
            ((0.95, 0.006, 16), 16),
            ((0.3, 0.006, 16), 3),
            // A CPU-like step (each token adds half a step): short drafts, none at 43 %.
            ((0.95, 0.5, 8), 5),
            ((0.8, 0.5, 8), 2),
            ((0.43, 0.5, 8), 0),
            // A token costs a whole step: no length pays unless every draft is certain.
            ((0.99, 1.0, 8), 0),
            ((1.0, 0.5, 8), 8),
            ((0.9, 0.0, 0), 0),
        ];
        for ((p, rho, k), want) in cases {
            assert_eq!(best_len(p, rho, k, false), want, "p {p} rho {rho} k {k}");
        }
    }

    #[test]
    fn shaped_lengths_are_one_less_than_a_power_of_two() {
        let floors: Vec<usize> = (0..17).map(shape_floor).collect();
        assert_eq!(
            floors,
            [0, 1, 1, 3, 3, 3, 3, 7, 7, 7, 7, 7, 7, 7, 7, 15, 15]
        );
        let cases = [
            // (p, rho, k) → length among 0, 1, 3, 7, 15
            ((0.9, 0.0, 8), 7),
            ((0.95, 0.006, 16), 15),
            ((0.3, 0.006, 16), 3),
            ((0.95, 0.5, 8), 7),
            ((0.8, 0.5, 8), 1),
            ((0.43, 0.5, 8), 0),
            ((1.0, 0.5, 8), 7),
            ((0.9, 0.0, 2), 1),
        ];
        for ((p, rho, k), want) in cases {
            assert_eq!(best_len(p, rho, k, true), want, "p {p} rho {rho} k {k}");
        }
        // At unknown cost the whole continuation and half of it, each cut to a shape.
        let mut pace = Pace::default();
        let lens: Vec<usize> = (0..4).map(|step| pace.len(16, None, step, true)).collect();
        assert_eq!(lens, [15, 7, 15, 7]);
        assert!(StepCost::default().shaped(true).is_shaped());
    }

    /// Steps of `n` tokens taking `a + b·n` ms.
    fn cost_of(steps: &[usize], a: f64, b: f64) -> StepCost {
        let mut c = StepCost::default();
        for &n in steps {
            c.observe(n, ((a + b * n as f64) * 1e6) as u64);
        }
        c
    }

    #[test]
    fn the_step_cost_fit_recovers_the_marginal_cost_of_a_token() {
        // CPU-like: 10 ms + 10 ms a token; one slot drafting 8 now and then.
        let steps: Vec<usize> = (0..60).map(|i| if i % 3 == 0 { 9 } else { 1 }).collect();
        let c = cost_of(&steps, 10.0, 10.0);
        let rho = |c: &StepCost, s| c.rho(s).expect("known");
        assert!((rho(&c, 1) - 0.5).abs() < 1e-6, "{}", rho(&c, 1));
        // Three slots: a draft token in each adds 30 ms to a 40 ms step.
        assert!((rho(&c, 3) - 0.75).abs() < 1e-6, "{}", rho(&c, 3));
        // GPU-like: 4 ms + 0.025 ms a token.
        let c = cost_of(&steps, 4.0, 0.025);
        assert!(rho(&c, 1) < 0.01, "{}", rho(&c, 1));
    }

    #[test]
    fn a_gpu_shapes_first_uses_stay_out_of_the_fit() {
        // Steps as (tokens, KV cells, ms).
        // Graphed: 4 ms + 0.01 ms a token; a shape's first two uses take 30 ms.
        let graphed = |n: usize| 4.0 + 0.01 * n as f64;
        let mut steps = vec![(1, 300, 30.0), (1, 300, 30.0), (1, 300, graphed(1))];
        for (i, n) in [8, 8, 8, 1, 8, 1, 16, 16, 16, 1].into_iter().enumerate() {
            let first = [0, 1, 6, 7].contains(&i);
            steps.push((n, 300, if first { 30.0 } else { graphed(n) }));
        }
        // The KV view crossing 512 cells is a new shape for every token count.
        steps.push((1, 513, 30.0));
        steps.push((1, 513, 30.0));
        steps.push((1, 513, graphed(1)));
        let run = |shaped: bool| {
            let mut c = StepCost::default().shaped(shaped);
            for &(n, kv, ms) in &steps {
                c.observe_step(n, kv, (ms * 1e6) as u64);
            }
            (c.rho(1), c.steps())
        };
        let (rho, counted) = run(true);
        let rho = rho.expect("two counts seen");
        assert!((rho - 0.01 / graphed(1)).abs() < 1e-6, "shaped: {rho}");
        assert_eq!(counted, steps.len() as u64);
        // Unshaped (a CPU: no graphs) every step is a sample; here the slow ones inflate it.
        let (rho, counted) = run(false);
        assert!(
            rho.expect("known") > 5.0 * 0.01 / graphed(1),
            "unshaped: {rho:?}"
        );
        assert_eq!(counted, steps.len() as u64);
    }

    #[test]
    fn a_fixed_cost_ignores_the_clock() {
        let mut c = StepCost::fixed(0.0);
        for (n, ns) in [(1, 10), (9, 10_000_000), (1, 20)] {
            c.observe(n, ns);
        }
        assert_eq!((c.rho(1), c.rho(4), c.steps()), (Some(0.0), Some(0.0), 3));
        // Free drafts are taken whole at any acceptance a draft can still win with.
        assert_eq!(best_len(0.5, 0.0, 8, false), 8);
        assert_eq!(StepCost::fixed(-1.0).rho(1), Some(0.0));
    }

    #[test]
    fn without_a_spread_of_token_counts_the_cost_is_unknown_and_measured_by_turns() {
        assert_eq!(StepCost::default().rho(1), None);
        assert_eq!(cost_of(&[1; 50], 10.0, 10.0).rho(1), None);
        assert_eq!(cost_of(&[9; 50], 10.0, 10.0).rho(1), None);
        // A fit whose drafted steps are long past forgets them and tries drafting again.
        let mut steps = vec![9, 1, 9, 1];
        assert!(cost_of(&steps, 10.0, 10.0).rho(1) > Some(0.4));
        steps.extend([1; 1000]);
        assert_eq!(cost_of(&steps, 10.0, 10.0).rho(1), None);
        // Noise that makes longer steps look cheaper is no negative cost.
        let c = cost_of(&[1, 9, 1, 9], 10.0, -1.0);
        assert_eq!(c.rho(1), Some(0.0));
        // At unknown cost a slot drafts its whole continuation and half of it by turns, so two
        // steps give the fit two token counts.
        let mut pace = Pace::default();
        let lens: Vec<usize> = (0..4).map(|step| pace.len(8, None, step, false)).collect();
        assert_eq!(lens, [8, 4, 8, 4]);
        assert_eq!(pace.len(1, None, 5, false), 1);
        let mut c = StepCost::default();
        for &l in &lens[..2] {
            c.observe(1 + l, ((10.0 + 10.0 * (1 + l) as f64) * 1e6) as u64);
        }
        assert!((c.rho(1).expect("known after two steps") - 0.5).abs() < 1e-6);
    }

    #[test]
    fn a_slot_drafts_while_its_drafts_pay_and_probes_when_they_do_not() {
        let rho = 0.5;
        let mut pace = Pace::default();
        assert!(pace.len(8, Some(rho), 1, false) > 0, "a new request drafts");
        // Drafts that are cut at their first token: acceptance falls and drafting stops...
        for _ in 0..10 {
            pace.observe(4, 0);
        }
        assert!(pace.p() < 0.2, "{}", pace.p());
        let lens: Vec<usize> = (1..=40)
            .map(|step| pace.len(8, Some(rho), step, false))
            .collect();
        // ...but for one token on every 16th step of the engine's clock (all slots alike).
        let probes: Vec<usize> = (0..40).filter(|&i| lens[i] > 0).map(|i| i + 1).collect();
        assert_eq!(probes, [16, 32]);
        assert!(lens.iter().all(|&l| l <= 1));
        // Text that starts repeating: accepted probes bring the drafts back, longer as they
        // keep being accepted.
        for _ in 0..6 {
            pace.observe(1, 1);
        }
        assert_eq!(pace.len(8, Some(rho), 41, false), 1, "p {}", pace.p());
        for _ in 0..20 {
            pace.observe(8, 8);
        }
        assert!(pace.len(8, Some(0.0), 42, false) == 8 && pace.len(8, Some(rho), 43, false) >= 5);
        // No draft, no evidence.
        let p = pace.p();
        pace.observe(0, 0);
        assert_eq!(pace.p(), p);
    }
}
