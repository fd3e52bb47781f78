//! Where a decode step's wall time goes (`--step-stats N`): the engine marks phase boundaries,
//! and every N decode-only steps one line of per-phase mean milliseconds goes to stderr. Steps
//! that carry prompt tokens are only counted (their time is prefill, not per-token overhead).
//! Off (N = 0) each mark is one branch; no clock is read.

use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
pub(super) enum Phase {
    /// Between steps: the job channel, cancellations, admission.
    Loop,
    /// Compaction, composition and filling the batch.
    Build,
    /// `llama_decode`'s host side (on a CPU backend: all of it).
    Launch,
    /// Waiting for the device to finish the step.
    Wait,
    /// Locating the output rows.
    Rows,
    Sample,
    /// Detokenizing, stop strings, sending chunks.
    Emit,
}

const N: usize = 7;
const NAMES: [&str; N] = ["loop", "build", "launch", "wait", "rows", "sample", "emit"];

pub(super) struct StepStats {
    every: u32,
    mark: Option<Instant>,
    cur: [Duration; N],
    sum: [Duration; N],
    steps: u32,
    rows: u64,
    prefill_steps: u32,
    /// The previous step's (tokens, output rows incl. pad rows): a CUDA graph is captured per
    /// shape, so a step whose shape differs from the one before runs without one (llama.cpp
    /// rebuilds its graph and the CUDA backend captures a new one).
    shape: (usize, usize),
    /// Decode steps with pad rows (`plan::padding`), and their pad rows.
    padded: u32,
    pad_rows: u64,
    /// Decode steps whose shape differed from the previous step's, and their launch time.
    changed: u32,
    changed_launch: Duration,
    /// The rows' own sampling time summed over the pool's threads (`sample` is wall time):
    /// this step's, and the decode steps' sum.
    step_cpu: Duration,
    sample_cpu: Duration,
}

impl StepStats {
    pub(super) fn new(every: u32) -> StepStats {
        StepStats {
            every,
            mark: None,
            cur: [Duration::ZERO; N],
            sum: [Duration::ZERO; N],
            steps: 0,
            rows: 0,
            prefill_steps: 0,
            shape: (0, 0),
            padded: 0,
            pad_rows: 0,
            changed: 0,
            changed_launch: Duration::ZERO,
            step_cpu: Duration::ZERO,
            sample_cpu: Duration::ZERO,
        }
    }

    /// Whether stats are kept (the caller may skip measuring otherwise).
    pub(super) fn on(&self) -> bool {
        self.every > 0
    }

    /// The rows of this step took `ns` of sampling in all (summed over threads).
    pub(super) fn sample_cpu(&mut self, ns: u64) {
        self.step_cpu += Duration::from_nanos(ns);
    }

    /// Close `phase` at now: the time since the previous mark is charged to it.
    pub(super) fn lap(&mut self, phase: Phase) {
        if self.every == 0 {
            return;
        }
        let now = Instant::now();
        if let Some(m) = self.mark {
            self.cur[phase as usize] += now - m;
        }
        self.mark = Some(now);
    }

    /// A step of `tokens` tokens (`pads` of them pad rows) ended with `rows` sampled rows;
    /// `prefill` when it carried prompt tokens.
    pub(super) fn end(&mut self, tokens: usize, rows: usize, pads: usize, prefill: bool) {
        if self.every == 0 {
            return;
        }
        let cur = std::mem::take(&mut self.cur);
        let cpu = std::mem::take(&mut self.step_cpu);
        let now = (tokens, rows + pads);
        let shape = std::mem::replace(&mut self.shape, now);
        if shape != now && !prefill {
            self.changed += 1;
            self.changed_launch += cur[Phase::Launch as usize];
        }
        if prefill {
            self.prefill_steps += 1;
            return;
        }
        for (s, c) in self.sum.iter_mut().zip(cur) {
            *s += c;
        }
        self.steps += 1;
        self.sample_cpu += cpu;
        self.rows += rows as u64;
        self.padded += u32::from(pads > 0);
        self.pad_rows += pads as u64;
        if self.steps == self.every {
            eprintln!("{}", self.report());
            let shape = self.shape;
            *self = StepStats::new(self.every);
            self.shape = shape;
        }
    }

    /// The engine went idle: the wait for the next job is not step overhead.
    pub(super) fn idle(&mut self) {
        self.mark = None;
        self.cur = [Duration::ZERO; N];
    }

    fn report(&self) -> String {
        // Mean milliseconds of `d` over `k` steps (at least one).
        let per = |d: Duration, k: u32| d.as_secs_f64() * 1e3 / f64::from(k.max(1));
        let ms = |d: Duration| per(d, self.steps);
        let total: Duration = self.sum.iter().sum();
        let parts: Vec<String> = NAMES
            .iter()
            .zip(self.sum)
            .map(|(name, d)| format!("{name} {:.3}", ms(d)))
            .collect();
        let launch = self.sum[Phase::Launch as usize];
        format!(
            "runner-llamacpp: step stats: {} decode steps ({} prefill steps between), {:.1} rows/step, ms/step: {} | total {:.3} | shape changed {} (launch {:.3} vs {:.3} same) | padded {} ({} rows) | sample cpu {:.3}",
            self.steps,
            self.prefill_steps,
            self.rows as f64 / f64::from(self.steps.max(1)),
            parts.join(" "),
            ms(total),
            self.changed,
            per(self.changed_launch, self.changed),
            per(
                launch.saturating_sub(self.changed_launch),
                self.steps.saturating_sub(self.changed)
            ),
            self.padded,
            self.pad_rows,
            ms(self.sample_cpu),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_are_charged_and_prefill_steps_only_counted() {
        let mut s = StepStats::new(1000);
        s.lap(Phase::Loop);
        std::thread::sleep(Duration::from_millis(3));
        s.lap(Phase::Launch);
        s.sample_cpu(2_500_000);
        s.end(16, 16, 0, false);
        s.lap(Phase::Loop);
        std::thread::sleep(Duration::from_millis(2));
        s.sample_cpu(9_000_000);
        s.lap(Phase::Sample);
        s.end(4, 4, 0, true);
        assert_eq!((s.steps, s.prefill_steps, s.rows), (1, 1, 16));
        assert!(s.sum[Phase::Launch as usize] >= Duration::from_millis(3));
        assert_eq!(s.sum[Phase::Sample as usize], Duration::ZERO);
        assert!(s
            .report()
            .contains("1 decode steps (1 prefill steps between), 16.0 rows/step"));
        assert_eq!(s.changed, 1, "the first step's shape is new");
        // The prefill step's sampling time is not a decode step's.
        assert!(s.report().ends_with("sample cpu 2.500"), "{}", s.report());
    }

    #[test]
    fn steps_whose_shape_changed_are_counted_apart() {
        let mut s = StepStats::new(1000);
        // (tokens, sampled rows, pad rows): a padded step keeps the shape of the one before.
        let steps = [
            (16, 16, 0),
            (16, 16, 0),
            (32, 16, 0),
            (32, 16, 0),
            (15, 15, 0),
            (16, 16, 0),
            (16, 15, 1),
            (16, 13, 3),
        ];
        for (tokens, rows, pads) in steps {
            s.lap(Phase::Loop);
            s.lap(Phase::Launch);
            s.end(tokens, rows, pads, false);
        }
        assert_eq!((s.steps, s.changed), (8, 4));
        assert!(s.report().contains("shape changed 4"), "{}", s.report());
        assert!(s.report().contains("padded 2 (4 rows)"), "{}", s.report());
    }

    #[test]
    fn off_reads_no_clock_and_keeps_nothing() {
        let mut s = StepStats::new(0);
        s.lap(Phase::Loop);
        s.lap(Phase::Launch);
        s.end(16, 16, 0, false);
        assert!(s.mark.is_none());
        assert_eq!(s.steps, 0);
    }
}
