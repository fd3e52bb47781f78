//! Waking the sampling pool shortly before a decode step's logits land (`--prewake`; on by
//! default when the whole model is on a GPU, `args::host_switch_on`).
//!
//! Sampling 16 rows on the pool costs ~0.29 ms of wall time a step against ~0.07 ms if the 16
//! threads ran at once: most of it is the threads waking from sleep when the rows arrive
//! (~0.25 ms in the H200 VM, runs E and H; waking them all at once did not help, run H). The
//! device's part of a decode step is steady (7.5-8 ms at x16 on the 8B), so right after the
//! launch each pool thread is given a task that sleeps until shortly before the last decode
//! step's wait would end and then spins until the engine says the logits are there; the
//! threads are then awake when the rows are handed out. Measured on an H100 (run V, one run):
//! 16 streams ÷ batched-bench B=16 0.835 without, 0.938 with; the step's sampling phase
//! 0.187 → 0.128 ms, its launch 0.50 → 0.41 ms.
//!
//! Bounds: a task sleeps in slices of [`SLICE`], checking for an early landing, and spins at
//! most [`SPIN_MAX`]; only decode-only steps are predicted from and armed, so a long prefill
//! step never makes the threads sleep through a short decode step's landing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The spinning starts this long before the predicted landing.
const MARGIN: Duration = Duration::from_micros(300);
/// A sleeping task checks for an early landing at least this often.
const SLICE: Duration = Duration::from_micros(200);
/// The longest a task spins; a later landing wakes the threads as without prewake.
const SPIN_MAX: Duration = Duration::from_micros(1500);

#[derive(Default)]
pub(super) struct Prewake {
    pub on: bool,
    /// Set when the logits of the armed step have landed.
    landed: Arc<AtomicBool>,
    /// The last decode-only step's wait (launch returned to logits landed).
    last_wait: Option<Duration>,
    armed_at: Option<Instant>,
}

impl Prewake {
    /// Right after a decode-only step's launch: each pool thread sleeps until [`MARGIN`] before
    /// the last such step's wait would end here, then spins until [`Prewake::landed`].
    pub(super) fn arm(&mut self, pool: Option<&rayon::ThreadPool>, decode_only: bool) {
        self.armed_at = None;
        let (true, Some(pool), true) = (self.on, pool, decode_only) else {
            return;
        };
        let now = Instant::now();
        self.armed_at = Some(now);
        let Some(wait) = self.last_wait else { return };
        let wake = now + wait.saturating_sub(MARGIN);
        let landed = Arc::new(AtomicBool::new(false));
        self.landed = landed.clone();
        pool.spawn_broadcast(move |_| {
            loop {
                if landed.load(Ordering::Acquire) {
                    return;
                }
                let left = wake.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(SLICE));
            }
            let until = Instant::now() + SPIN_MAX;
            while !landed.load(Ordering::Acquire) && Instant::now() < until {
                std::hint::spin_loop();
            }
        });
    }

    /// The armed step's logits have landed: the spinning threads go on to sample, and its wait
    /// predicts the next one's.
    pub(super) fn landed(&mut self) {
        self.landed.store(true, Ordering::Release);
        if let Some(at) = self.armed_at.take() {
            self.last_wait = Some(at.elapsed());
        }
    }
}
