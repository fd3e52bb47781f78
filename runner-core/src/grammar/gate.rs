//! Holding the grammar workers' masks back until the engine has launched its next step
//! (runner-llamacpp's `--mask-after-launch`, on by default when the whole model is on a GPU;
//! off unless [`enable`]d).
//!
//! A constrained slot's worker starts its next mask as soon as the slot's token is committed,
//! which is while the engine is still sampling the other rows and then building and launching
//! the step: the part of a GPU step the host is on the critical path for. With 16 constrained
//! streams that is 16 mask computations (55–130 µs p50 each, H100/H200) competing for the
//! cores with the sampling pool, the engine thread and llama.cpp's own CPU threads, and x16
//! steps with masks launched 0.2–0.4 ms slower than free ones when their shape stayed (run U).
//! Gated, a worker applies the commit and reports the forced bytes at once (fast-forward
//! needs them to build the step), then waits for the next launch before computing the mask,
//! which then overlaps the device's part of the step only.
//!
//! Gated, the commit itself also waits: the sampler keeps the chosen token until the engine's
//! `flush` after the step's rows are sampled, so no worker wakes on a core the sampling pool's
//! threads are using (each commit woke its worker mid-sample before).
//!
//! Some masks are wanted before the next launch: the row after a grammar fast-forward run, and
//! a draft row verified after an accepted draft token. Asking for a mask that is not ready
//! hurries its worker ([`wake`] and the worker's own hurry mark), which then stops waiting.
//!
//! Invariant: a gated worker waits at most [`LIMIT`], never a hang.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Longest a worker holds its mask back.
pub const LIMIT: Duration = Duration::from_millis(2);

static ON: AtomicBool = AtomicBool::new(false);
/// Steps launched since the process started.
static LAUNCHED: Mutex<u64> = Mutex::new(0);
static CHANGED: Condvar = Condvar::new();

/// Gate every worker of this process from now on.
pub fn enable() {
    ON.store(true, Ordering::SeqCst);
}

/// Whether the gate is on (then a commit also waits for the engine's `flush`: grammar::mod).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The engine has launched a step: workers waiting for one go on.
pub fn launched() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    if let Ok(mut n) = LAUNCHED.lock() {
        *n += 1;
        CHANGED.notify_all();
    }
}

/// The launch count now (taken when a command is sent to a worker).
pub fn now() -> u64 {
    if !ON.load(Ordering::Relaxed) {
        return 0;
    }
    LAUNCHED.lock().map(|n| *n).unwrap_or(0)
}

/// Wait until a step was launched after `seen` (a [`now`]) or `hurried()` says the engine
/// wants the mask now, at most [`LIMIT`]; at once when the gate is off.
pub fn wait_past(seen: u64, hurried: impl Fn() -> bool) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let until = Instant::now() + LIMIT;
    let Ok(mut n) = LAUNCHED.lock() else { return };
    while *n <= seen && !hurried() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match CHANGED.wait_timeout(n, left) {
            Ok((g, _)) => n = g,
            Err(_) => return,
        }
    }
}

/// Wake every waiting worker to look at its hurry mark again (set before calling this).
pub fn wake() {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    // Taking the lock orders the mark before a waiter's check: a waiter that checked and did
    // not see it is inside `wait_timeout` by the time this notifies.
    let _g = LAUNCHED.lock();
    CHANGED.notify_all();
}
