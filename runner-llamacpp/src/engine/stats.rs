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
    /// The previous step's (tokens, rows): a CUDA graph is captured per shape, so a step whose
    /// shape differs from the one before runs without one (llama.cpp's graph warm-up).
    shape: (usize, usize),
    /// Decode steps whose shape differed from the previous step's, and their launch time.
    changed: u32,
    changed_launch: Duration,
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
            changed: 0,
            changed_launch: Duration::ZERO,
        }
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

    /// A step of `tokens` tokens ended with `rows` sampled rows; `prefill` when it carried prompt
    /// tokens.
    pub(super) fn end(&mut self, tokens: usize, rows: usize, prefill: bool) {
        if self.every == 0 {
            return;
        }
        let cur = std::mem::take(&mut self.cur);
        let shape = std::mem::replace(&mut self.shape, (tokens, rows));
        if shape != (tokens, rows) && !prefill {
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
        self.rows += rows as u64;
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
            "runner-llamacpp: step stats: {} decode steps ({} prefill steps between), {:.1} rows/step, ms/step: {} | total {:.3} | shape changed {} (launch {:.3} vs {:.3} same)",
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
        s.end(16, 16, false);
        s.lap(Phase::Loop);
        std::thread::sleep(Duration::from_millis(2));
        s.lap(Phase::Sample);
        s.end(4, 4, true);
        assert_eq!((s.steps, s.prefill_steps, s.rows), (1, 1, 16));
        assert!(s.sum[Phase::Launch as usize] >= Duration::from_millis(3));
        assert_eq!(s.sum[Phase::Sample as usize], Duration::ZERO);
        assert!(s
            .report()
            .contains("1 decode steps (1 prefill steps between), 16.0 rows/step"));
        assert_eq!(s.changed, 1, "the first step's shape is new");
    }

    #[test]
    fn steps_whose_shape_changed_are_counted_apart() {
        let mut s = StepStats::new(1000);
        for (tokens, rows) in [(16, 16), (16, 16), (32, 16), (32, 16), (15, 15), (16, 16)] {
            s.lap(Phase::Loop);
            s.lap(Phase::Launch);
            s.end(tokens, rows, false);
        }
        assert_eq!((s.steps, s.changed), (6, 4));
        assert!(s.report().contains("shape changed 4"), "{}", s.report());
    }

    #[test]
    fn off_reads_no_clock_and_keeps_nothing() {
        let mut s = StepStats::new(0);
        s.lap(Phase::Loop);
        s.lap(Phase::Launch);
        s.end(16, 16, false);
        assert!(s.mark.is_none());
        assert_eq!(s.steps, 0);
    }
}
